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


def run_once(work_dir, name, command, env=None, cwd=ROOT):
    """WORK/<name>/metrics.json, running `command` (in `env`, default this process's;
    in `cwd`) first unless it exists."""
    metrics = os.path.join(work_dir, name, "metrics.json")
    if not os.path.exists(metrics):
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(command)}", flush=True)
        subprocess.run(command, cwd=cwd, check=True, env=env)
    with open(metrics) as f:
        return json.load(f)


# The folder -> package map of setup.cfg [options] package_dir (its one owner), for
# `other_tree_env`.
PACKAGES = {
    "keras_vit": "keras_vit",
    "keras_vit_benchmarks": "benchmarks",
    "keras_vit_cli": "cli",
    "keras_vit_configs": "configs",
    "keras_vit_data": "data",
    "keras_vit_deploy": "deploy",
    "keras_vit_tools": "tools",
    "keras_vit_trainers": "trainers",
}


def other_tree_env(tree, shim_dir):
    """An environment in which `python -m keras_vit_trainers.pretrain` runs the code of
    `tree` (a checkout of another commit, e.g. `git worktree add`): `shim_dir` gets a
    link per installed package name to its folder in `tree` and goes first on
    PYTHONPATH, ahead of this checkout's editable install. Run it with `tree` as the
    working folder: `python -m` puts the working folder first on the path."""
    os.makedirs(shim_dir, exist_ok=True)
    for package, folder in PACKAGES.items():
        link = os.path.join(shim_dir, package)
        if not os.path.islink(link):
            os.symlink(os.path.join(os.path.abspath(tree), folder), link)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [shim_dir, env.get("PYTHONPATH")]))
    return env


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


def holdout_records(work_dir):
    """WORK/data_holdout: Fashion-MNIST's training images with a stratified 10% held
    out as `validation` (a sweep never scores on the test split)."""
    from keras_vit_data import fashion_mnist, writer

    data_dir = os.path.join(work_dir, "data_holdout")
    writer.ensure_records(fashion_mnist.source_name(), data_dir, holdout=0.1)
    return data_dir


def load_points(folder):
    """The benchmark points (`write_point`'s JSONs) in `folder`, in file-name order."""
    import glob

    points = []
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(path) as f:
            points.append(json.load(f))
    return points


def write_point(path, result, load_before):
    """Writes `result` (one benchmark point) to `path` as JSON, with the machine's load
    before (`load_before`, os.getloadavg()) and after the run, the commit, the date and
    the machine (cli/machine.py)."""
    from keras_vit_cli.machine import machine_info, source_commit

    result = dict(
        result,
        loadavg_before=load_before,
        loadavg_after=os.getloadavg(),
        commit=source_commit(),
        date=time.strftime("%Y-%m-%d %H:%M"),
        machine=machine_info(),
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return result


def mean_std(values):
    """(mean, sample standard deviation; 0 for one value)."""
    values = [float(v) for v in values]
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0
