"""default, mirrored (2 CPU replicas) and multi_worker (2 local processes, started by
docs/training.md's commands as written) training agree with single-device training on
the same global batches."""

import json
import os
import signal
import subprocess

import doc_blocks
import keras
import numpy as np
import pytest
import trainer_testing as testing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

STEPS = ["--config.total_steps=3", "--config.checkpoint_every=1"]
TRAINING_PAGE = os.path.join(doc_blocks.ROOT, "docs", "training.md")


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d))
    return str(d)


@pytest.fixture(scope="module")
def reference(data, tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("default"))
    r = testing.run(testing.trainer_cmd("pretrain", data, run_dir, "--strategy=default", *STEPS))
    assert r.returncode == 0, r.stderr[-3000:]
    return run_dir


def _assert_same_training(run_dir, reference):
    losses = [l["loss"] for l in testing.train_log(run_dir)]
    ref = [l["loss"] for l in testing.train_log(reference)]
    assert len(losses) == len(ref) == 3
    np.testing.assert_allclose(losses, ref, rtol=1e-4)
    w, w_ref = testing.load_weights(run_dir), testing.load_weights(reference)
    assert w.keys() == w_ref.keys()
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_default_trains_and_writes_run_dir(data, reference):
    with open(f"{reference}/metrics.json") as f:
        metrics = json.load(f)
    assert metrics["step"] == 3 and metrics["num_replicas"] == 1
    assert 0.0 <= metrics["test_accuracy"] <= 1.0
    assert metrics["train_images_per_second"] > 0
    with open(f"{reference}/model_config.json") as f:
        assert json.load(f)["hidden_size"] == 16
    assert os.listdir(f"{reference}/tensorboard/train")
    # Where the data is, for the export reports (deploy/datasets.py): an absolute path.
    with open(f"{reference}/data.json") as f:
        assert json.load(f) == {"data_dir": data, "dataset": None, "tfds_data_dir": None}


def test_mirrored_two_cpu_replicas_matches_default(data, reference, tmp_path):
    r = testing.run(
        testing.trainer_cmd(
            "pretrain", data, str(tmp_path), "--strategy=mirrored", "--cpu_replicas=2", *STEPS
        )
    )
    assert r.returncode == 0, r.stderr[-3000:]
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f)["num_replicas"] == 2
    _assert_same_training(str(tmp_path), reference)


def _two_workers_block():
    """docs/training.md's block that starts two workers (the one with TF_CONFIG)."""
    (code,) = [c for info, c in doc_blocks.blocks(TRAINING_PAGE) if "TF_CONFIG=" in c]
    return code


def test_multi_worker_two_processes_matches_default(data, reference, tmp_path):
    """docs/training.md's two-worker commands, run as written on 127.0.0.1 (free ports,
    the tiny model, the reference's steps)."""
    port0, port1 = testing.free_ports(2)
    flags = [
        *testing.TINY,
        # by example: every global batch holds the examples one device sees
        # (auto would give each worker its own 2 of the 4 shards)
        "--config.input.shard_by=examples",
        *STEPS,
    ]
    bash = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", _two_workers_block()],
        cwd=testing.ROOT,
        env=testing.env(
            DATA=data,
            RUN=str(tmp_path),
            PORT0=str(port0),
            PORT1=str(port1),
            TRAIN_FLAGS=" ".join(flags),
            PATH=os.path.dirname(testing.PY) + os.pathsep + os.environ["PATH"],
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the workers too are ended on a timeout
    )
    try:
        _, err = bash.communicate(timeout=240)
    finally:
        if bash.poll() is None:
            os.killpg(bash.pid, signal.SIGKILL)
            bash.communicate()
    assert bash.returncode == 0, err[-3000:]
    with open(tmp_path / "metrics.json") as f:
        assert json.load(f)["strategy"] in (
            "MultiWorkerMirroredStrategy",
            "CollectiveAllReduceStrategy",
        )
    _assert_same_training(str(tmp_path), reference)


def test_finetune_from_pretrain_run_dir(data, reference, tmp_path):
    """--init=RUN: new resolution (interpolated position embeddings), EMA weights exported."""
    r = testing.run(
        testing.trainer_cmd(
            "finetune",
            data,
            str(tmp_path),
            f"--init={reference}",
            "--strategy=default",
            "--config.image_size=35",
            "--config.finetune.total_steps=2",
            "--config.finetune.checkpoint_every=1",
            "--config.finetune.warmup_steps=1",
            "--config.finetune.ema_momentum=0.5",
        )
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "Resizing position embeddings from a 4x4 grid to 5x5" in r.stderr
    with open(tmp_path / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["mode"] == "finetune" and metrics["step"] == 2
    with open(tmp_path / "model_config.json") as f:
        assert list(json.load(f)["image_size"]) == [35, 35]
    with open(tmp_path / "config.json") as f:
        config = json.load(f)
    assert config["optimizer"] == "sgd" and config["ema_momentum"] == 0.5


def test_mirrored_with_gradient_accumulation_equals_one_big_batch(data, reference, tmp_path):
    """2 replicas x 2 accumulated micro-batches of 4 = the reference's update on 16."""
    run_dir = str(tmp_path / "accum")
    r = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--strategy=mirrored",
            "--cpu_replicas=2",
            "--config.grad_accum_steps=2",
            *STEPS,
        )
    )
    assert r.returncode == 0, r.stderr[-3000:]
    _assert_same_training(run_dir, reference)
    metrics = json.load(open(f"{run_dir}/metrics.json"))
    assert metrics["step"] == 3 and metrics["grad_accum_steps"] == 2
    assert metrics["global_batch_size"] == 16
