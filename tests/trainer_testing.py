"""Helpers for the trainer tests: tiny synthetic data, tiny configs, subprocess runs
(test code: it lives under tests/, out of the wheel)."""

import contextlib
import json
import os
import socket
import subprocess

import numpy as np
import warm_programs

from keras_vit.run_directory import RunDirectory
from keras_vit_cli import commands
from keras_vit_cli.commands import PY, ROOT  # noqa: F401  (the tests' names for them)

# A ViT small enough that a step takes milliseconds: 4x4 patches of 7x7 on 28x28
# images, one block 16 wide (tests/tiny_models.py builds the tests' models from it).
TINY_MODEL = dict(hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1, patch_size=7)

# The trainer command-line flags for TINY_MODEL and a fast schedule.
TINY = [
    *(f"--config.model.{key}={value}" for key, value in TINY_MODEL.items()),
    "--config.batch_size=16",
    "--config.warmup_steps=1",
    "--config.evals.test.batch_size=64",
    "--config.deterministic_ops=True",
    "--config.jit_compile=False",
]  # XLA does not run under MirroredStrategy on CPUs


def synthetic_split(n, seed, num_classes=4, size=28):
    """Learnable images: class k lights up band k, plus noise."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n)
    images = rng.integers(0, 60, (n, size, size), dtype=np.uint8)
    band = size // num_classes
    for i, k in enumerate(labels):
        images[i, k * band : (k + 1) * band] += 150
    return images, labels


def data_with_bad_records(directory, n=24, bad=(5, 14), odd_size=()):
    """One shard of n 4x4 PNGs, record i of label i and pixels i, written directly
    (tools/make_tfrecords.py skips what does not decode): record bad[0] holds bytes
    that are not an image, record bad[1] is not a tf.train.Example at all; both
    CRC-valid. The records in `odd_size` are 4x5 images (ones that decode)."""
    import tensorflow as tf

    from keras_vit_data import records

    shard = records.shard_name("train", 0, 1)
    with tf.io.TFRecordWriter(os.path.join(directory, shard)) as writer:
        for i in range(n):
            if i == bad[0]:
                writer.write(records.serialize_example(b"not an image", [i]))
            elif i == bad[1]:
                writer.write(b"not a tf.train.Example")
            else:
                width = 5 if i in odd_size else 4
                png = tf.io.encode_png(np.full((4, width, 3), i, np.uint8)).numpy()
                writer.write(records.serialize_example(png, [i]))
    manifest = {"num_classes": n, "splits": {"train": {"count": n, "shards": []}}}
    manifest["splits"]["train"]["shards"].append({"file": shard, "count": n})
    records.write_manifest(directory, manifest)
    return str(directory)


def make_tiny_data(output_dir, n_train=128, n_test=64, per_shard=32, num_classes=4, size=28):
    from keras_vit_data import writer

    splits = {}
    for name, n, seed in (("train", n_train, 0), ("test", n_test, 1)):
        images, labels = synthetic_split(n, seed, num_classes, size)
        splits[name] = (n, zip(images, labels))
    return writer.make_tfrecords(
        (splits, [f"class_{i}" for i in range(num_classes)], False),
        output_dir,
        examples_per_shard=per_shard,
        progress=False,
    )


def trainer_cmd(trainer, data_dir, model_dir, *extra, config="configs/fashion_mnist.py"):
    """The trainer's command line at TINY_MODEL's size and schedule."""
    return commands.trainer_command(trainer, config, data_dir, model_dir, *TINY, *extra)


def tiny_config(config, every=0, **keys):
    """`config` (an ml_collections recipe) at TINY_MODEL's size and TINY's schedule, for
    a trainer run in this process: 2 steps of 16, a test evaluation `every` steps (0:
    at the end only), `keys` over all of it."""
    config.model.update(TINY_MODEL)
    test = dict(type="classification", split="test", every=every, batch_size=32)
    config.update(
        {
            "batch_size": 16,
            "warmup_steps": 1,
            "evals": dict(test=test),
            "total_steps": 2,
            "checkpoint_every": 2,
            "jit_compile": False,
            "deterministic_ops": True,
            **keys,
        }
    )
    return config


def env(**extra):
    e = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    e.pop("TF_CONFIG", None)
    e.update(extra)
    return e


def run(cmd, timeout=240, **env_extra):
    return warm_programs.run(
        cmd,
        cwd=ROOT,
        env=env(**env_extra),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextlib.contextmanager
def started(cmd, **popen_kwargs):
    """A subprocess started now with its output captured (text), for a fixture that
    overlaps a slow start-up with other tests; killed on exit if still running."""
    process = warm_programs.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen_kwargs
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def start_workers(cmd, n=2, env_extra=None, **popen_kwargs):
    """`cmd` started as n MultiWorkerMirroredStrategy workers on 127.0.0.1 (TF_CONFIG
    for each, and `env_extra`), output captured (text); the caller ends them
    (`communicate_all`)."""
    cluster = {"worker": [f"127.0.0.1:{p}" for p in free_ports(n)]}
    return [
        warm_programs.Popen(
            cmd,
            cwd=ROOT,
            env=env(
                TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}}),
                **(env_extra or {}),
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            **popen_kwargs,
        )
        for i in range(n)
    ]


def communicate_all(procs, timeout=240):
    """[(stdout, stderr)] of each process once it ends; all killed on a timeout."""
    try:
        return [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()


def train_log(model_dir):
    with open(RunDirectory(model_dir).train_log) as f:
        return [json.loads(l) for l in f]


def load_weights(model_dir):
    """The exported weights of a run, as a list of arrays."""
    import h5py

    out = []
    with h5py.File(RunDirectory(model_dir).weights, "r") as f:
        f.visititems(
            lambda name, obj: out.append((name, obj[()])) if hasattr(obj, "shape") else None
        )
    return dict(out)


def take(ds, n):
    """The first n (images, labels) batches of a dataset, as numpy arrays."""
    return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]


def first_checkpoint_file(run_dir):
    """The file whose appearance says RUN's first checkpoint is complete
    (tf.train.CheckpointManager writes its state file after the checkpoint)."""
    return os.path.join(run_dir, "checkpoints", "checkpoint")


def kill_after_first_checkpoint(cmd, run_dir, timeout=240):
    """Starts the trainer `cmd` and kill -9s it once RUN/checkpoints has a checkpoint
    (no cleanup, no final save); asserts it had not finished."""
    import time

    proc = warm_programs.Popen(
        cmd, cwd=ROOT, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    meta = first_checkpoint_file(run_dir)
    deadline = time.time() + timeout
    while not os.path.exists(meta) and proc.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    assert not os.path.exists(os.path.join(run_dir, "metrics.json")), "finished before the kill"
