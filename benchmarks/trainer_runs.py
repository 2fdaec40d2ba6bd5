"""Trainer runs for the benchmarks that compare training recipes: each run is a
trainer command whose RUN/metrics.json, once written, stands for it (a rerun of the
benchmark skips it, so an interrupted benchmark resumes where it stopped).

Stdlib only at import; Keras and the trainers are imported by the functions that need
them.
"""

import json
import os
import statistics
import subprocess
import time

from keras_vit_cli.commands import ROOT


def run_once(work_dir, name, command):
    """WORK/<name>/metrics.json, running `command` first unless it exists."""
    metrics = os.path.join(work_dir, name, "metrics.json")
    if not os.path.exists(metrics):
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
        subprocess.run(command, cwd=ROOT, check=True)
    with open(metrics) as f:
        return json.load(f)


def export_random_init(config, run_dir, seed, num_classes, like=None):
    """A RUN directory holding `config`'s model (trainers' `model_factory`; with `like`
    a RUN, that RUN's architecture) as initialised with `seed`: the from-scratch arm of
    a comparison, as a starting point that `finetune.py --init` treats exactly as a
    pre-trained RUN."""
    if os.path.exists(os.path.join(run_dir, "model.weights.h5")):
        return run_dir
    import keras

    from keras_vit_trainers import train_lib

    keras.utils.set_random_seed(int(seed))
    model = train_lib.model_factory(config, like)(num_classes=num_classes)
    train_lib.export(model, run_dir)
    return run_dir


def mean_std(values):
    """(mean, sample standard deviation; 0 for one value)."""
    values = [float(v) for v in values]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0
