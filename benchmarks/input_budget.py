"""The input pipeline's CPU budget: training images/s per host core for 224-px JPEGs, and
the cores a host needs to feed an accelerator.

  python benchmarks/input_budget.py [--data_dir=DIR] [--batch_size=128] [--batches=24] [--warmup=4]
      [--threads=1,2] [--setups=i21k,augreg_i21k,augreg_i21k:medium2]
      [--targets="H200 (ViT-B/16 goal)=3700,TPU v3-8 host=2600"]
      [--output=benchmarks/results/input_budget.json]

For each setup, each in a fresh subprocess, iterates `input_pipeline.train_dataset` (no
model) with the config's input settings as trainers/train_config.resolve gives them:
  i21k                  configs/vit_b16_i21k.py: inception crop + flip;
  augreg_i21k           configs/augreg_i21k.py (ViT_B16): crop + flip, then its default
                        AugReg setting (light2: RandAugment(2, 10), Mixup 0.2);
  augreg_i21k:SETTING   the same with input.aug_setting=SETTING (e.g. medium2:
                        RandAugment(2, 15), Mixup 0.5),
with tf.data's threads limited to --threads (`tf.data.Options().threading.
private_threadpool_size`, and max_intra_op_parallelism=1 so an op does not spread
over more). After --warmup batches (which also fill the first shuffle window), it
times --batches batches and reads the process's CPU time (getrusage: user + system)
over them: images per CPU-second is the images/s one core gives, whatever else the
machine runs; wall-clock images/s is recorded too, with the cores the run kept busy
(CPU-seconds / seconds) and the load average. Cores needed = target images/s / images/s
per core (the 1-thread run's; the 2-thread one checks that it scales).

The data: --data_dir (a split written by benchmarks/input_resume.py, or any data
directory of 224-px JPEGs with a train split), or else a split of --records synthetic
224-px JPEGs (benchmarks/make_tfrecords_speed.py's images) written under /tmp and deleted
at the end. The start-up CRC scan is off (verify_max_bytes=0, as for an
ImageNet-21k-sized split). Prints and writes JSON that names the machine
(cli/machine.py).

The targets are parameters: 3,700 images/s is the H200 training goal for ViT-B/16 set
for this project (docs/speed.md); 2,600 images/s for a TPU v3-8 host is an assumed
example figure, not a measurement: replace it with a measured step rate.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

DEFAULT_TARGETS = "H200 (ViT-B/16 goal)=3700,TPU v3-8 host (assumed)=2600"


def setup_spec(data_dir, setup):
    """(InputSpec, description) of `setup` ('i21k', 'augreg_i21k' or
    'augreg_i21k:SETTING') for the data in `data_dir`."""
    import dataclasses

    from keras_vit_configs import augreg_i21k, vit_b16_i21k
    from keras_vit_trainers import input_pipeline, input_spec, objectives, train_config
    from keras_vit_trainers.augment import settings

    name, _, aug = setup.partition(":")
    if name == "i21k":
        config, path = vit_b16_i21k.get_config(), "configs/vit_b16_i21k.py"
    elif name == "augreg_i21k":
        config, path = augreg_i21k.get_config("ViT_B16"), "configs/augreg_i21k.py:ViT_B16"
        if aug:
            config.input.aug_setting = aug
    else:
        raise ValueError(f"setup {setup!r}: expected i21k, augreg_i21k or augreg_i21k:SETTING")
    config = train_config.resolve(config, "pretrain")
    manifest = input_pipeline.read_manifest(data_dir)
    spec = input_spec.InputSpec.from_config(
        config,
        config.num_classes or int(manifest["num_classes"]),
        bool(manifest.get("multi_label", False)),
        objectives.get(config.objective),
    )
    spec = dataclasses.replace(spec, verify_max_bytes=0)
    what = f"{spec.crop}" + (" + flip" if spec.flip else "")
    if spec.augmentation:
        what += ", " + settings.describe(spec.augmentation)
    if config.input.get("aug_setting"):
        what += f" (aug_setting={config.input.aug_setting})"
    return spec, path, what


def child(a):
    """One measurement in this fresh process: prints one JSON line."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    from keras_vit_trainers import input_pipeline

    spec, path, what = setup_spec(a.data_dir, a.setup)
    ds = input_pipeline.train_dataset(a.data_dir, spec, batch_size=a.batch_size)
    options = tf.data.Options()
    options.threading.private_threadpool_size = a.threads
    options.threading.max_intra_op_parallelism = 1
    it = iter(ds.with_options(options))
    t = time.perf_counter()
    for _ in range(a.warmup):
        next(it)
    warmup_seconds = time.perf_counter() - t
    cpu0 = sum(resource.getrusage(resource.RUSAGE_SELF)[:2])
    t0 = time.perf_counter()
    for _ in range(a.batches):
        images, _ = next(it)
    seconds = time.perf_counter() - t0
    cpu = sum(resource.getrusage(resource.RUSAGE_SELF)[:2]) - cpu0
    images = a.batches * a.batch_size
    result = {
        "setup": a.setup,
        "config": path,
        "augmentation": what,
        "threads": a.threads,
        "batch_size": a.batch_size,
        "batches": a.batches,
        "images": images,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "images_per_second": images / seconds,
        "images_per_cpu_second": images / cpu,
        "cores_busy": cpu / seconds,
        "warmup_seconds": warmup_seconds,
        "shuffle_window": input_pipeline.shuffle_window(
            input_pipeline.get_split(a.data_dir, spec.split, verify_max_bytes=0), spec
        ),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "loadavg": os.getloadavg(),
        "tensorflow": tf.__version__,
    }
    print("RESULT " + json.dumps(result), flush=True)


def run_child(a, data_dir, setup, threads):
    cmd = [
        sys.executable,
        "-m",
        "keras_vit_benchmarks.input_budget",
        "--child",
        f"--data_dir={data_dir}",
        f"--setup={setup}",
        f"--threads={threads}",
        f"--batch_size={a.batch_size}",
        f"--batches={a.batches}",
        f"--warmup={a.warmup}",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True)
    lines = [x for x in out.stdout.splitlines() if x.startswith("RESULT ")]
    if out.returncode or not lines:
        raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stderr[-3000:]}")
    result = json.loads(lines[-1][len("RESULT ") :])
    print(json.dumps(result), flush=True)
    return result


def parse_targets(text):
    """'name=images/s,...' -> {name: float}."""
    targets = {}
    for item in text.split(","):
        name, _, rate = item.rpartition("=")
        targets[name.strip()] = float(rate)
    return targets


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data_dir", default=None)
    p.add_argument("--records", type=int, default=8192, help="written when no --data_dir")
    p.add_argument("--batch_size", type=int, default=128)
    p.add_argument("--batches", type=int, default=24)
    p.add_argument("--warmup", type=int, default=4)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--setups", default="i21k,augreg_i21k,augreg_i21k:medium2")
    p.add_argument("--targets", default=DEFAULT_TARGETS)
    p.add_argument("--output", default=None)
    p.add_argument("--child", action="store_true")
    p.add_argument("--setup", default="i21k")
    a = p.parse_args()
    if a.child:
        a.threads = int(a.threads)
        return child(a)
    from keras_vit_benchmarks.input_resume import ensure_split, read_shards
    from keras_vit_cli.machine import machine_info, report, source_commit

    targets = parse_targets(a.targets)
    tmp, data_dir, written = None, a.data_dir, None
    try:
        if data_dir is None:
            tmp = tempfile.mkdtemp(prefix="input_budget_", dir="/tmp")
            data_dir = os.path.join(tmp, "data")
            written = ensure_split(data_dir, a.records, 16)
        shards, total = read_shards(data_dir)  # into the page cache
        with open(os.path.join(data_dir, "manifest.json")) as f:
            num_records = json.load(f)["splits"]["train"]["count"]
        runs = [
            run_child(a, data_dir, setup, int(threads))
            for setup in a.setups.split(",")
            for threads in a.threads.split(",")
        ]
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    budget = []
    for setup in a.setups.split(","):
        mine = {r["threads"]: r for r in runs if r["setup"] == setup}
        one = mine[min(mine)]
        row = {
            "setup": setup,
            "augmentation": one["augmentation"],
            "images_per_second_per_core": one["images_per_cpu_second"],
            "cores_needed": {
                name: rate / one["images_per_cpu_second"] for name, rate in targets.items()
            },
        }
        for threads, r in sorted(mine.items()):
            row[f"images_per_second_{threads}_threads"] = r["images_per_second"]
            row[f"images_per_cpu_second_{threads}_threads"] = r["images_per_cpu_second"]
        budget.append(row)
    result = {
        "benchmark": "input_budget",
        "records": num_records,
        "shards": shards,
        "mean_record_bytes": total / num_records,
        "image_size": 224,
        "written": written,
        "targets_images_per_second": targets,
        "budget": budget,
        "runs": runs,
        "source_commit": source_commit(),
        "command": " ".join(["python", "benchmarks/input_budget.py", *sys.argv[1:]]),
        "loadavg": os.getloadavg(),
        "machine": machine_info(),
    }
    report(result, a.output)


if __name__ == "__main__":
    main()
