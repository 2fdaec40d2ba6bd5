"""config.input.data_service: the training stream through tf.data service workers
(trainers/input_pipeline.py `service_records`, `from_service`; tools/data_service.py).
A dispatcher and two workers run as processes of tools/data_service.py on 127.0.0.1,
started once for the module and stopped (killed if need be) at its end."""

import collections
import contextlib
import json
import logging
import os
import queue
import signal
import subprocess
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing
import warm_programs

from keras_vit.run_directory import RunDirectory
from keras_vit_data import records
from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers.input_spec import InputSpec

N_TRAIN, PER_SHARD, NUM_CLASSES = 40, 8, 4  # five shards
READY_S = 120  # a server's start-up (TensorFlow's import) on a loaded machine
WORKERS = 2


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(d, n_train=N_TRAIN, n_test=16, per_shard=PER_SHARD)
    return d


class _Server:
    """A tools/data_service.py process whose output lines are read by a thread."""

    def __init__(self, *flags):
        cmd = [testing.PY, os.path.join(testing.ROOT, "tools", "data_service.py"), *flags]
        self.process = warm_programs.Popen(
            cmd,
            cwd=testing.ROOT,
            env=testing.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.lines = queue.Queue()
        self.output = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            self.output.append(line)
            self.lines.put(line)

    def ready(self, timeout=READY_S):
        """The server's ready line (fails after `timeout` s or if it exits first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1.0)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if line.startswith("data_service:") and "ready" in line:
                return line.strip()
        pytest.fail(f"tools/data_service.py not ready:\n{''.join(self.output)[-3000:]}")

    def stop(self, timeout=30):
        """SIGTERM, then SIGKILL after `timeout` s; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@pytest.fixture(scope="module")
def service():
    """grpc://127.0.0.1:PORT of a dispatcher with two workers."""
    with contextlib.ExitStack() as stack:
        servers = []

        def start(*flags):
            server = _Server(*flags, "--host=127.0.0.1")
            servers.append(server)
            stack.callback(server.stop)
            return server

        dispatcher = start("--role=dispatcher", "--port=0")
        address = dispatcher.ready().rsplit(" ", 1)[1]  # grpc://127.0.0.1:PORT
        workers = [start("--role=worker", f"--dispatcher={address}") for _ in range(WORKERS)]
        for worker in workers:
            assert worker.ready().startswith("data_service: worker ready at 127.0.0.1:")
        yield address
        # A clean exit on SIGTERM (the ExitStack then finds them stopped).
        for server in reversed(servers):
            assert server.stop() == 0, "".join(server.output)[-2000:]
            assert "stopped" in server.output[-1]


def _spec(address, **kw):
    return InputSpec(
        image_size=28,
        crop="none",
        flip=False,
        shuffle_buffer=8,
        seed=3,
        num_classes=NUM_CLASSES,
        data_service=address,
        **kw,
    )


def _split_examples(info):
    """[(label, image uint8 (28, 28, 3))] of the split's records, in order."""
    out = []
    for record in records.read_records(info):
        encoded, label = ip.parse(record, NUM_CLASSES, False)
        out.append((int(label), ip.decode(encoded).numpy()))
    return out


def test_one_epoch_through_the_service_has_every_example_once(service, data):
    """The records of epoch 0, as two workers deliver them (decoded there), are the
    split's records, each exactly once: by index, label and image."""
    info = ip.get_split(data, "train")
    spec = _spec(service)
    expected = _split_examples(info)
    assert len({img.tobytes() for _, img in expected}) == N_TRAIN  # every image its own

    def on_worker(epoch, index, record):
        encoded, label = ip.parse(record, NUM_CLASSES, False)
        return epoch, index, label, ip.decode(encoded)

    ds = ip.service_records(info, spec).map(on_worker).batch(4)
    ds = ip.from_service(ds, spec, "test-one-epoch")
    seen = collections.Counter()
    for epoch, index, label, image in ds.take(10 * N_TRAIN // 4):  # bounded: 10 epochs
        for e, i, y, x in zip(epoch.numpy(), index.numpy(), label.numpy(), image.numpy()):
            if e == 0:
                seen[int(i)] += 1
                assert int(y) == expected[i][0]
                np.testing.assert_array_equal(x, expected[i][1])
        if len(seen) == N_TRAIN:
            break
    assert sorted(seen) == list(range(N_TRAIN))
    assert set(seen.values()) == {1}


def test_train_dataset_batches_come_from_the_workers(service, data, caplog):
    """train_dataset with input.data_service: batches of the split's examples, and one
    log line that says what the service changes."""
    info = ip.get_split(data, "train")
    labels = collections.Counter(y for y, _ in _split_examples(info))
    caplog.set_level(logging.INFO)
    ds = ip.train_dataset(data, _spec(service), batch_size=8, job_name="test-train-dataset")
    got = collections.Counter()
    for images, batch_labels in ds.take(N_TRAIN // 8):
        assert images.shape == (8, 28, 28, 3) and batch_labels.shape == (8,)
        assert -1.0 <= float(tf.reduce_min(images)) <= float(tf.reduce_max(images)) <= 1.0
        got.update(int(y) for y in batch_labels.numpy())
    assert sum(got.values()) == N_TRAIN and set(got) <= set(labels)
    assert f"input.data_service={service}: decoding, augmentation and batching" in caplog.text
    assert "not the deterministic stream" in caplog.text


def test_resume_starts_after_the_whole_files_consumed(data):
    """service_first_split: the epoch the consumed examples end in, after the files of
    that epoch's order whose records are all consumed (no service needed)."""
    info = ip.get_split(data, "train")
    spec = _spec("grpc://127.0.0.1:1")
    num_files = len(info.files)
    assert num_files == N_TRAIN // PER_SHARD
    assert ip.service_first_split(info, spec, 0) == 0
    assert ip.service_first_split(info, spec, PER_SHARD - 1) == 0
    assert ip.service_first_split(info, spec, PER_SHARD) == 1
    assert ip.service_first_split(info, spec, 2 * N_TRAIN + PER_SHARD + 3) == 2 * num_files + 1
    a = ip.service_job_name("runs/a", 0, 0)
    assert a == ip.service_job_name("runs/a", 0, 0)
    assert len({a, ip.service_job_name("runs/b", 0, 0), ip.service_job_name("runs/a", 0, 5)}) == 3


# A tiny run: 3 steps of 8 through the service, one checkpoint.
SERVICE_RUN = ("--strategy=default", "--config.total_steps=3", "--config.checkpoint_every=3")


def test_trainer_through_the_service_writes_metrics(service, data, tmp_path):
    run_dir = str(tmp_path / "run")
    service_flag = f"--config.input.data_service={service}"
    cmd = testing.trainer_cmd("pretrain", data, run_dir, *SERVICE_RUN, service_flag)
    r = testing.run([*cmd, "--config.batch_size=8"], timeout=300)
    assert r.returncode == 0, r.stderr[-4000:]
    assert "input.data_service=" in r.stderr + r.stdout
    with open(RunDirectory(run_dir).metrics) as f:
        metrics = json.load(f)
    assert metrics["step"] == 3
    assert np.isfinite(metrics["train_loss"])
