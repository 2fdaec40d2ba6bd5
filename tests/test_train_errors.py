"""Bad inputs fail clearly: missing/empty data_dir, corrupt shards, NaN loss, no TPU."""

import json
import os

import keras
import pytest
from keras_vit_trainers import testing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d))
    return str(d)


def test_missing_data_dir_is_named(tmp_path):
    missing = str(tmp_path / "nope")
    r = testing.run(
        testing.trainer_cmd("pretrain", missing, str(tmp_path / "run"), "--strategy=default")
    )
    assert r.returncode == 2
    assert f"--data_dir={missing}: no such directory" in r.stderr
    assert "make_tfrecords.py" in r.stderr


def test_empty_data_dir_is_named(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    r = testing.run(
        testing.trainer_cmd("pretrain", str(empty), str(tmp_path / "run"), "--strategy=default")
    )
    assert r.returncode == 2
    assert f"--data_dir={empty}: no manifest.json (and no .tfrecord shards)" in r.stderr


def test_tpu_strategy_without_tpu_is_a_clear_error(data, tmp_path):
    r = testing.run(
        testing.trainer_cmd("pretrain", data, str(tmp_path / "run"), "--strategy=tpu"), TPU_NAME=""
    )
    assert r.returncode == 2
    assert "--strategy=tpu but no TPU was given or found" in r.stderr
    assert "Traceback" not in r.stderr


def test_nan_loss_stops_and_keeps_last_good_checkpoint(data, tmp_path):
    run_dir = str(tmp_path / "run")
    # lr 0 for step 1 (warmup), then 5e37 with no clipping: weights overflow at step 2,
    # the loss of step 3 is NaN.
    r = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--strategy=default",
            "--config.total_steps=6",
            "--config.checkpoint_every=1",
            "--config.warmup_steps=2",
            "--config.optimizer=sgd",
            "--config.momentum=0.0",
            "--config.learning_rate=1e38",
            "--config.decay_type=constant",
            "--config.grad_clip_norm=0",
        )
    )
    assert r.returncode == 3, r.stderr[-3000:]
    assert "loss became NaN/inf at step" in r.stderr
    assert "last good checkpoint" in r.stderr
    with open(os.path.join(run_dir, "checkpoints", "training_metadata.json")) as f:
        saved = json.load(f)["epoch"]
    log = testing.train_log(run_dir)
    finite = [l for l in log if l["loss"] == l["loss"]]
    assert log[-1]["loss"] != log[-1]["loss"]  # the NaN interval is logged ...
    assert 1 <= saved == len(finite) < 6  # ... but only finite ones were checkpointed
    assert os.path.exists(os.path.join(run_dir, "checkpoints", "latest.weights.h5"))
    assert not os.path.exists(os.path.join(run_dir, "metrics.json"))
