"""trainers/checkpointing.py: what a run's checkpoints hold and which stay."""

import os

import keras
import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)


def _model_and_optimizer():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dropout(0.5)])
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(model.trainable_variables)
    return model, optimizer


def _checkpoints(directory, **options):
    from keras_vit_trainers import checkpointing

    model, optimizer = _model_and_optimizer()
    state = checkpointing.training_state(model, optimizer)
    return model, optimizer, checkpointing.RunCheckpoints(str(directory), state, **options)


def test_the_state_saves_asynchronously_and_restores_every_variable(tmp_path):
    model, optimizer, checkpoints = _checkpoints(tmp_path, async_save=True)
    # the dropout layer's random generator is a model variable, not a weight
    assert len(model.variables) > len(model.weights)
    saved = [np.array(v) + 1 for v in [*model.variables, *optimizer.variables]]
    for v, value in zip([*model.variables, *optimizer.variables], saved):
        v.assign(value)
    checkpoints.save(7)  # Keras 3 variables themselves would fail here (async copy)
    checkpoints.sync()

    other, other_optimizer, restored = _checkpoints(tmp_path)
    assert restored.restore(7) == 7
    for v, value in zip([*other.variables, *other_optimizer.variables], saved):
        np.testing.assert_array_equal(np.array(v), value)


def test_newest_are_kept_with_a_history_and_another_run_writes_over_its_steps(tmp_path):
    from keras_vit_trainers import checkpointing, controller

    model, _, checkpoints = _checkpoints(tmp_path, keep=2, keep_every=20)
    action = checkpointing.CheckpointAction(checkpoints, every=10, total_steps=45)
    kernel = model.weights[0]
    for step in (5, 10, 15, 20, 30, 40):  # due at 10, 20, 30, 40 only
        kernel.assign(np.full(kernel.shape, step, "float32"))
        action.after_steps(controller.Boundary(step))
    assert action.last_good == 40
    kernel.assign(np.full(kernel.shape, -1.0, "float32"))
    action.save_now(40)  # the same step again in this run (a preemption there): kept as it was
    assert checkpointing.saved_steps(str(tmp_path)) == [40, 30, 20]
    assert sorted(os.listdir(tmp_path / "history")) == sorted(
        [
            "checkpoint",
            *(f"ckpt-{s}.{e}" for s in (20, 40) for e in ("index", "data-00000-of-00001")),
        ]
    )
    assert checkpointing.restore_model(model, str(tmp_path)) == 40
    assert float(np.array(kernel).max()) == 40.0

    # A run resumed from step 20 (--config.resume_step) trains another history: its
    # step 30 is written over the first run's.
    model, _, resumed = _checkpoints(tmp_path, keep=2, keep_every=20)
    kernel = model.weights[0]
    action = checkpointing.CheckpointAction(resumed, every=10, total_steps=45)
    assert action.restore(20) == 20 and action.last_good == 20
    kernel.assign(np.full(kernel.shape, 300.0, "float32"))
    action.after_steps(controller.Boundary(30))
    assert checkpointing.restore_model(model, str(tmp_path), 30) == 30
    assert float(np.array(kernel).max()) == 300.0
    with pytest.raises(checkpointing.CheckpointError, match=r"no checkpoint of step 25 \(it has"):
        resumed.restore(25)


@pytest.mark.parametrize("hidden", [(), (4,)])  # a wider layer; one layer more
def test_the_checkpoint_of_another_model_is_refused_in_one_line(tmp_path, hidden):
    """A run folder holding another architecture's checkpoints (a demo of the former
    default model, rerun after the default changed) is one error naming the file."""
    from keras_vit_trainers import checkpointing

    _, _, checkpoints = _checkpoints(tmp_path)
    checkpoints.save(4)
    checkpoints.sync()
    layers = [keras.layers.Dense(n) for n in hidden] + [keras.layers.Dense(3 - len(hidden))]
    other = keras.Sequential([keras.Input((3,)), *layers, keras.layers.Dropout(0.5)])
    optimizer = keras.optimizers.AdamW(1e-3)
    optimizer.build(other.trainable_variables)
    state = checkpointing.training_state(other, optimizer)
    restored = checkpointing.RunCheckpoints(str(tmp_path), state)
    with pytest.raises(checkpointing.CheckpointError) as e:
        restored.restore(4)
    message = str(e.value)
    assert "ckpt-4 does not hold this run's model and optimizer" in message
    assert message.endswith("train into a new --model_dir.") and "\n" not in message
