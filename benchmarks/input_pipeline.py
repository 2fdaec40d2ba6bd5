"""Input-pipeline throughput (images/s decoded + augmented) vs. what the trainer consumes.

  python benchmarks/input_pipeline.py [--data_dir=runs/data/fashion_mnist]
      [--config=configs/fashion_mnist.py] [--run=RUN] [--batches=200]

Iterates trainers.input_pipeline.train_dataset with the config's augmentation and
global batch (no model), and compares with RUN/metrics.json's
train_images_per_second (the demo run by default) when present. Prints JSON that names
the machine (cli/machine.py: CPU kinds differ up to 4x).
"""

import argparse
import importlib.util
import json
import os
import time

from keras_vit_cli import commands
from keras_vit_cli.commands import ROOT


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default=commands.DEMO_DATA_DIR)
    p.add_argument("--config", default=os.path.join(ROOT, "configs", "fashion_mnist.py"))
    p.add_argument("--run", default=os.path.join(ROOT, "runs", "fashion_mnist_hybrid"))
    p.add_argument("--batches", type=int, default=200)
    a = p.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from keras_vit.run_directory import RunDirectory
    from keras_vit_cli.machine import describe, machine_info
    from keras_vit_trainers import input_pipeline, input_spec, objectives, train_config

    spec = importlib.util.spec_from_file_location("cfg", a.config)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    config = train_config.resolve(module.get_config(), "pretrain")  # as a trainer runs it
    inp = config.input
    manifest = input_pipeline.read_manifest(a.data_dir)
    data_spec = input_spec.InputSpec.from_config(
        config,
        config.num_classes or int(manifest["num_classes"]),
        bool(manifest.get("multi_label", False)),
        objectives.get(config.objective),
    )
    ds = input_pipeline.train_dataset(a.data_dir, data_spec, batch_size=config.batch_size)
    machine = machine_info()
    it = iter(ds)
    for _ in range(5):  # warm up (fill the shuffle window)
        next(it)
    t = time.perf_counter()
    for _ in range(a.batches):
        next(it)
    rate = a.batches * config.batch_size / (time.perf_counter() - t)
    result = {
        "pipeline_images_per_second": rate,
        "batch_size": config.batch_size,
        "crop": inp.crop,
        "loadavg": os.getloadavg(),
        "machine": machine,
    }
    metrics = RunDirectory(a.run).metrics
    if os.path.exists(metrics):
        with open(metrics) as f:
            consumed = json.load(f)["train_images_per_second"]
        result.update(trainer_images_per_second=consumed, headroom=rate / consumed)
    print(describe(machine))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
