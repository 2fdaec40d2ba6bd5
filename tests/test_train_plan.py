"""train_lib: the step plan (sizes, the step resumed at, resumes under another global
batch or schedule, checkpoints of the release before) and what it reads of the
optimizer."""

import os
import types

import ml_collections
import pytest

from keras_vit_trainers import checkpointing, train_lib

ONE_REPLICA = types.SimpleNamespace(num_replicas_in_sync=1)


def _config(**keys):
    values = dict(
        batch_size=8, grad_accum_steps=1, steps_per_execution=1, total_steps=60, checkpoint_every=10
    )
    values.update(keys)
    return ml_collections.ConfigDict(values)


def test_sizes_that_do_not_fit_are_refused(tmp_path):
    with pytest.raises(train_lib.PlanError, match="must all be at least 1"):
        train_lib.plan(_config(checkpoint_every=0), ONE_REPLICA, str(tmp_path))
    with pytest.raises(train_lib.PlanError, match="divisible by the 1 replicas x grad_accum"):
        train_lib.plan(_config(batch_size=8, grad_accum_steps=3), ONE_REPLICA, str(tmp_path))


def test_every_shipped_recipe_has_a_plan(tmp_path):
    import importlib
    import pkgutil

    import keras_vit_configs
    from keras_vit_trainers import train_config

    planned = []
    for module_info in pkgutil.iter_modules(keras_vit_configs.__path__):
        module = importlib.import_module(f"keras_vit_configs.{module_info.name}")
        if not hasattr(module, "get_config"):
            continue
        for mode in ("pretrain", "finetune"):
            config = train_config.resolve(module.get_config(), mode)
            directory = str(tmp_path / f"{module_info.name}_{mode}")
            os.makedirs(directory)
            sizes = train_lib.plan(config, ONE_REPLICA, directory)
            # the steps of the recipe, whatever its checkpoint interval
            assert sizes.total_steps == config.total_steps, (module_info.name, mode)
            planned.append(module_info.name)
    assert {"vit_b16_i21k", "augreg_i21k", "fashion_mnist"} <= set(planned)


def _checkpointed(directory, step):
    """A checkpoint of `step` in `directory`, as CheckpointManager writes it."""
    import tensorflow as tf

    state = tf.train.Checkpoint(v=tf.Variable(1.0))
    manager = tf.train.CheckpointManager(state, directory, None, checkpoint_name="ckpt")
    manager.save(checkpoint_number=step)


def test_a_resume_under_the_same_plan_continues_and_under_another_is_refused(tmp_path):
    directory = str(tmp_path / "checkpoints")
    os.makedirs(directory)
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 0
    assert os.path.exists(os.path.join(directory, checkpointing.PLAN_FILE))
    # Stopped before its first checkpoint: nothing to resume, so another plan may start.
    assert train_lib.plan(_config(total_steps=80), ONE_REPLICA, directory).total_steps == 80
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 0
    _checkpointed(directory, 20)
    _checkpointed(directory, 30)
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 30
    # The checkpoint interval, steps per call, micro-batches and replicas may change.
    sizes = train_lib.plan(
        _config(checkpoint_every=20, steps_per_execution=5, grad_accum_steps=2),
        types.SimpleNamespace(num_replicas_in_sync=4),
        directory,
    )
    assert (sizes.start_step, sizes.every, sizes.steps_per_execution) == (30, 20, 5)
    assert train_lib.plan(_config(resume_step=20), ONE_REPLICA, directory).start_step == 20
    with pytest.raises(train_lib.PlanError, match=r"resume_step=25: .* \(it has: 30, 20\)"):
        train_lib.plan(_config(resume_step=25), ONE_REPLICA, directory)
    for changed, named in (
        (dict(total_steps=80), "total_steps 60 -> 80"),
        (dict(batch_size=16), "batch 8 -> 16"),
    ):
        with pytest.raises(train_lib.PlanError, match=named) as e:
            train_lib.plan(_config(**changed), ONE_REPLICA, directory)
        assert "\n" not in str(e.value)


@pytest.mark.parametrize("old", ["training_metadata.json", "latest.weights.h5", "../workers"])
def test_checkpoints_of_the_release_before_are_refused_in_one_line(tmp_path, old):
    directory = str(tmp_path / "checkpoints")
    os.makedirs(directory)
    path = os.path.normpath(os.path.join(directory, old))
    os.makedirs(path) if old.startswith("..") else open(path, "w").close()
    with pytest.raises(train_lib.PlanError, match="earlier keras_vit release") as e:
        train_lib.plan(_config(), ONE_REPLICA, directory)
    assert "\n" not in str(e.value) and os.path.basename(path) in str(e.value)


def test_ema_is_seen_through_the_loss_scale_wrapper():
    import keras

    inner = keras.optimizers.AdamW(use_ema=True)
    assert train_lib.uses_ema(inner)
    assert train_lib.uses_ema(keras.optimizers.LossScaleOptimizer(inner))
    assert not train_lib.uses_ema(keras.optimizers.LossScaleOptimizer(keras.optimizers.AdamW()))
    assert not train_lib.uses_ema(keras.optimizers.SGD())
