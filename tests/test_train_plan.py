"""train_lib: the step plan (checkpoint interval, steps trained, resumes under another
plan) and what it reads of the optimizer."""

import json
import os
import types

import ml_collections
import pytest

from keras_vit_trainers import train_lib

ONE_REPLICA = types.SimpleNamespace(num_replicas_in_sync=1)


def _config(**keys):
    values = dict(
        batch_size=8, grad_accum_steps=1, steps_per_execution=1, total_steps=60, checkpoint_every=10
    )
    values.update(keys)
    return ml_collections.ConfigDict(values)


@pytest.mark.parametrize(
    "total, every, spe",
    [(4500, 500, 1), (4500, 1000, 1), (311_945, 1000, 100), (280_004, 1000, 1), (7, 500, 1)],
)
def test_the_interval_divides_the_steps_trained_in_multiples_of_steps_per_execution(
    total, every, spe
):
    interval, trained = train_lib._checkpoint_interval(total, every, spe)
    assert trained % interval == 0 and interval % spe == 0
    assert min(every, total) // 2 <= interval <= min(every, total)
    assert abs(trained - total) <= interval // 2


def test_a_divisor_near_the_interval_keeps_the_steps_and_none_rounds_them():
    assert train_lib._checkpoint_interval(4500, 500, 1) == (500, 4500)
    assert train_lib._checkpoint_interval(4500, 1000, 1) == (900, 4500)
    # configs/vit_b16_i21k.py: 90 epochs of 12,743,321 images at batch 4096 are 280,004
    # steps, which no multiple of steps_per_execution=100 divides.
    assert train_lib._checkpoint_interval(280_004, 1000, 100) == (1000, 280_000)
    with pytest.raises(train_lib.PlanError, match="must all be at least 1"):
        train_lib._checkpoint_interval(100, 0, 1)


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
            assert sizes.total_steps % sizes.every == 0, (module_info.name, mode)
            assert abs(sizes.total_steps - config.total_steps) <= sizes.every // 2
            planned.append(module_info.name)
    assert {"vit_b16_i21k", "augreg_i21k", "fashion_mnist"} <= set(planned)


def _checkpointed(directory, epoch):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "training_metadata.json"), "w") as f:
        json.dump({"epoch": epoch}, f)


def test_a_resume_under_the_same_plan_continues_and_under_another_is_refused(tmp_path):
    directory = str(tmp_path / "checkpoints")
    os.makedirs(directory)
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 0
    assert os.path.exists(os.path.join(directory, train_lib.PLAN_FILE))
    # Stopped before its first checkpoint: nothing to resume, so another plan may start.
    assert train_lib.plan(_config(total_steps=80), ONE_REPLICA, directory).total_steps == 80
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 0
    _checkpointed(directory, 3)
    assert train_lib.plan(_config(), ONE_REPLICA, directory).start_step == 30
    for changed, named in (
        (dict(total_steps=80), "total_steps 60 -> 80"),
        (dict(checkpoint_every=20), "every 10 -> 20"),
        (dict(batch_size=16), "batch 8 -> 16"),
    ):
        with pytest.raises(train_lib.PlanError, match=named):
            train_lib.plan(_config(**changed), ONE_REPLICA, directory)


def test_unreadable_checkpoint_metadata_is_named(tmp_path):
    directory = str(tmp_path / "checkpoints")
    os.makedirs(directory)
    with open(os.path.join(directory, "training_metadata.json"), "w") as f:
        f.write('{"epoch"')  # cut short by a crash
    with pytest.raises(train_lib.PlanError, match="training_metadata.json: not the checkpoint"):
        train_lib.plan(_config(), ONE_REPLICA, directory)


def test_ema_is_seen_through_the_loss_scale_wrapper():
    import keras

    inner = keras.optimizers.AdamW(use_ema=True)
    assert train_lib.uses_ema(inner)
    assert train_lib.uses_ema(keras.optimizers.LossScaleOptimizer(inner))
    assert not train_lib.uses_ema(keras.optimizers.LossScaleOptimizer(keras.optimizers.AdamW()))
    assert not train_lib.uses_ema(keras.optimizers.SGD())
