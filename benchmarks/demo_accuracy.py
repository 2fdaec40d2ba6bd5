"""Times the README demo from scratch and checks its Fashion-MNIST test accuracy.

  python benchmarks/demo_accuracy.py [--target=0.92] [--budget_s=900] [--config=...]
                                     [--data_dir=...] [--model_dir=...] [trainer flags]

Runs tools/demo.py (its DEMO_CONFIG, the default strategy) in a fresh run directory
(a removed temporary one unless --model_dir names one to keep; TFRecords in
--data_dir are reused, a new --data_dir times their writing too), prints accuracy, wall time, images/s and the machine load,
and writes benchmarks/results/demo_accuracy.json, both naming the machine
(benchmarks/machine.py: CPU kinds differ up to 4x) and the commit. That file is
the one source of the demo figure the README and docs quote (`make demo` itself
writes nothing tracked).
"""

import json
import os
import shutil
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
from keras_vit_benchmarks.machine import describe, machine_info, source_commit
from keras_vit_tools import demo


def main(argv):
    args = list(argv)
    target = float(demo._opt(args, "target", "0.92"))
    budget = float(demo._opt(args, "budget_s", "900"))
    keep = demo._opt(args, "model_dir", None)  # kept; by default a removed temporary
    model_dir = keep or tempfile.mkdtemp(prefix="demo_accuracy_")
    load_before = os.getloadavg()
    machine = machine_info()
    config = demo._opt(list(args), "config", demo.DEMO_CONFIG)
    commit = source_commit()  # the code that runs (taken before, not after, the run)
    t0 = time.time()
    metrics = demo.main([f"--model_dir={model_dir}", *args])
    wall = time.time() - t0
    result = {
        "test_accuracy": metrics["test_accuracy"],
        "wall_seconds": wall,
        "train_wall_seconds": metrics["wall_seconds"],
        "train_images_per_second": metrics["train_images_per_second"],
        "steps": metrics["step"],
        "cpu_count": os.cpu_count(),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
        "target": target,
        "budget_s": budget,
        "passed": metrics["test_accuracy"] >= target and wall <= budget,
        "config": config,
        "extra_flags": args,
        "commit": commit,
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine,
    }
    os.makedirs(os.path.join(ROOT, "benchmarks", "results"), exist_ok=True)
    with open(os.path.join(ROOT, "benchmarks", "results", "demo_accuracy.json"), "w") as f:
        json.dump(result, f, indent=1)
    print(describe(machine))
    print(json.dumps(result, indent=1))
    if not keep:
        shutil.rmtree(model_dir, ignore_errors=True)
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
