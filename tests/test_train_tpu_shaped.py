"""A TPU-shaped run on this CPU: the TPU configs' own settings together (XLA,
steps_per_execution > 1, mixed bfloat16, static batch shapes, evaluation padded to whole
batches) train to the weights of steps_per_execution=1, with checkpoints, logs and
evaluations at the configured steps. What only a TPU shows: docs/training.md."""

import json
import os

import keras
import numpy as np
import pytest
import trainer_testing as testing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

TPU_SHAPED = [
    "--strategy=default",
    "--config.total_steps=20",
    "--config.checkpoint_every=10",
    "--config.warmup_steps=4",
    "--config.jit_compile=True",
    "--config.deterministic_ops=False",  # (Keras compiles no XLA under op determinism)
    "--config.mixed_precision=True",
    "--config.evals.test.every=10",
    "--config.evals.test.batch_size=48",  # 64 test images: the last batch padded
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{steps_per_execution: its run directory}, the two runs started at once."""
    data = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(data)
    dirs = {n: str(tmp_path_factory.mktemp(f"spe{n}")) for n in (1, 5)}
    import contextlib

    with contextlib.ExitStack() as stack:
        procs = {
            n: stack.enter_context(
                testing.started(
                    testing.trainer_cmd(
                        "pretrain", data, d, *TPU_SHAPED, f"--config.steps_per_execution={n}"
                    ),
                    cwd=testing.ROOT,
                    env=testing.env(),
                )
            )
            for n, d in dirs.items()
        }
        for proc in procs.values():
            _, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, err[-3000:]
    return dirs


def test_tpu_settings_train_to_the_weights_of_one_step_per_execution(runs):
    metrics = {}
    for n, run_dir in runs.items():
        with open(os.path.join(run_dir, "metrics.json")) as f:
            metrics[n] = json.load(f)
        assert metrics[n]["step"] == 20 and metrics[n]["jit_compile"] is True
        # Checkpoints and logs at the configured steps, whatever the steps per execution.
        assert [l["step"] for l in testing.train_log(run_dir)] == [10, 20]
        history = metrics[n]["evals"]["test"]["history"]
        assert {int(step) for step in history} == {10, 20}
    with open(os.path.join(runs[5], "config.json")) as f:
        config = json.load(f)
    assert config["steps_per_execution"] == 5 and config["mixed_precision"] is True
    w1, w5 = testing.load_weights(runs[1]), testing.load_weights(runs[5])
    assert w1.keys() == w5.keys()
    for k in w1:
        # The same steps in another grouping: equal to float32 rounding (the weights
        # are float32 under mixed bfloat16; each step's arithmetic is the same).
        np.testing.assert_allclose(w5[k], w1[k], rtol=1e-5, atol=1e-6, err_msg=k)
    for n in runs:
        assert metrics[n]["test_accuracy"] == pytest.approx(metrics[1]["test_accuracy"], abs=1e-6)
