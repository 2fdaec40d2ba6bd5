"""kill -9 in the middle of a run, rerun the same command: it resumes at the
checkpointed step and ends with the weights of an uninterrupted run, with the
regularisers real pre-training uses on (dropout, attention dropout, stochastic depth,
RandAugment, Mixup: their random generators are in the checkpoint)."""

import re

import keras
import numpy as np
import pytest
import trainer_testing as testing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

STEPS = [
    "--strategy=default",
    "--config.total_steps=60",
    "--config.checkpoint_every=10",
    "--config.warmup_steps=5",
]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d))
    return str(d)


REGULARISED = [
    "--config.model.dropout_rate=0.1",
    "--config.model.attention_dropout_rate=0.1",
    "--config.model.stochastic_depth_rate=0.1",
    "--config.input.randaug=randaug(2,10)",
    "--config.input.mixup=0.2",
]


def _train_loss_points(run_dir):
    """[step of each train/loss point] in the run's TensorBoard events, in file order."""
    import os

    import tensorflow as tf

    folder = os.path.join(run_dir, "tensorboard", "train")
    steps = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("events.out.tfevents"):
            for event in tf.compat.v1.train.summary_iterator(os.path.join(folder, name)):
                steps += [event.step for v in event.summary.value if v.tag == "train/loss"]
    return steps


# Plain runs resume exactly too: tests/test_train_faults.py (SIGTERM, one process and two
# workers, without regularisers); the controller's schedule on resume, in-process:
# tests/test_controller.py.
def test_kill_9_then_resume_equals_uninterrupted_and_a_rollback_retrains_the_same(data, tmp_path):
    regularisers = REGULARISED
    ref_dir, run_dir = str(tmp_path / "ref"), str(tmp_path / "run")
    ref = testing.run(testing.trainer_cmd("pretrain", data, ref_dir, *STEPS, *regularisers))
    assert ref.returncode == 0, ref.stderr[-3000:]

    cmd = testing.trainer_cmd("pretrain", data, run_dir, *STEPS, *regularisers)
    testing.kill_after_first_checkpoint(cmd, run_dir)  # SIGKILL: no final checkpoint

    resumed = testing.run(cmd)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    m = re.search(r"resumed from step (\d+)", resumed.stderr)
    assert m, resumed.stderr[-3000:]
    step = int(m.group(1))
    assert step % 10 == 0 and 10 <= step < 60
    log = testing.train_log(run_dir)
    assert [l["step"] for l in log if l["step"] > step] == list(range(step + 10, 61, 10))

    w, w_ref = testing.load_weights(run_dir), testing.load_weights(ref_dir)
    assert w.keys() == w_ref.keys()
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
    ref_log = {l["step"]: l["loss"] for l in testing.train_log(ref_dir)}
    for l in log:
        if l["step"] > step:
            assert l["loss"] == pytest.approx(ref_log[l["step"]], rel=1e-6)

    # Rolled back to step 40 of the finished run (--config.resume_step; the run keeps its
    # newest three checkpoints, 40-60): the same steps again, each step one record and one
    # TensorBoard point, the same weights.
    again = testing.run([*cmd, "--config.resume_step=40"])
    assert again.returncode == 0 and "resumed from step 40" in again.stderr, again.stderr[-3000:]
    assert [l["step"] for l in testing.train_log(run_dir)] == list(range(10, 61, 10))
    assert _train_loss_points(run_dir) == list(range(10, 61, 10))
    w = testing.load_weights(run_dir)
    for k in w:
        np.testing.assert_allclose(w[k], w_ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
