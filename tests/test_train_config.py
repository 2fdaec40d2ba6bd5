"""trainers/train_config.resolve: defaults from configs/common.py, the mode's section,
and the command line, which always wins; and the trainer's exit on an --init that
does not fit the config."""

import logging

import pytest
import trainer_testing as testing

from keras_vit_configs import common, fashion_mnist
from keras_vit_trainers import train_config


def test_defaults_come_from_common_and_the_mode():
    for mode, defaults in common.TRAINER_DEFAULTS.items():
        config = train_config.resolve(common.base_config(), mode)
        for key, value in defaults.items():
            assert config[key] == value, (mode, key)
        assert "pretrain" not in config and "finetune" not in config
    # A config file missing keys gets them from base_config.
    sparse = common.base_config()
    del sparse["evals"]
    assert train_config.resolve(sparse, "pretrain").evals.test.type == "classification"


def test_the_section_applies_and_the_command_line_wins():
    config = fashion_mnist.get_config()
    section = config.finetune.total_steps
    assert train_config.resolve(config, "finetune").total_steps == section
    assert train_config.resolve(config, "pretrain").total_steps == config.total_steps
    # --config.total_steps=20 with a finetune section that sets total_steps: the flag wins.
    config.total_steps = 20
    resolved = train_config.resolve(config, "finetune", {"total_steps": 20})
    assert resolved.total_steps == 20
    assert resolved.learning_rate == config.finetune.learning_rate  # the rest of the section
    # The section's own key on the command line works too.
    config.finetune.total_steps = 7
    resolved = train_config.resolve(config, "finetune", {"finetune.total_steps": 7})
    assert resolved.total_steps == 7
    with pytest.raises(ValueError, match=r"--config.finetune.total_steps: .*--config.total_steps"):
        train_config.resolve(config, "pretrain", {"finetune.total_steps": 7})


def test_model_may_be_a_builder_name_or_a_dict():
    config = fashion_mnist.get_config()
    assert config.model.patch_size == 7
    config.model = "ViT_Ti16"  # as --config.model=ViT_Ti16 sets it
    assert train_config.resolve(config, "pretrain").model == "ViT_Ti16"


def _config_program(main_body, *flags):
    """A small absl program with trainers/app.py's --config flag, run with `flags`:
    `main_body` (lines of `main(_)`; flags.FLAGS, config_flags and train_config in scope)."""
    return testing.run(
        [
            testing.PY,
            "-c",
            "from absl import app, flags\n"
            "from ml_collections import config_flags\n"
            "from keras_vit_trainers import train_config\n"
            "config_flags.DEFINE_config_file('config', None, '', lock_config=False)\n"
            "def main(_):\n" + "".join(f"    {line}\n" for line in main_body) + "app.run(main)\n",
            "--config=configs/fashion_mnist.py",
            *flags,
        ]
    )


def test_config_flag_accepts_a_builder_name_for_a_dict_model():
    r = _config_program(["print('MODEL', flags.FLAGS.config.model)"], "--config.model=ViT_Ti16")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "MODEL ViT_Ti16" in r.stdout


def _resolve_logging(caplog, config, mode="pretrain", overrides=None):
    """train_config.resolve's config and the warnings it logged."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trainers"):
        resolved = train_config.resolve(config, mode, overrides)
    return resolved, [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_the_former_crop_key_sets_the_crop_with_one_warning(caplog):
    """input.augment, renamed input.crop, still works for one release: the command
    line's (over the config file's crop) or a config file's, with one warning line."""
    config = fashion_mnist.get_config()
    assert config.input.crop == "none" and config.input.augment is None
    resolved, warned = _resolve_logging(caplog, config, overrides={"input.augment": "random_crop"})
    assert (resolved.input.crop, resolved.input.augment) == ("random_crop", None)
    assert warned == ["input.augment is deprecated: use --config.input.crop=random_crop"]
    # A config file that sets the old key, in the top level or in the mode's section.
    old_file = common.base_config()
    old_file.input.augment = "none"
    resolved, warned = _resolve_logging(caplog, old_file, "finetune")
    assert (resolved.input.crop, resolved.input.augment) == ("none", None)
    assert warned == ["input.augment is deprecated: use --config.input.crop=none"]
    sectioned = common.base_config()
    sectioned.finetune.input = {"augment": "random_crop"}
    assert _resolve_logging(caplog, sectioned, "finetune")[0].input.crop == "random_crop"
    resolved, warned = _resolve_logging(caplog, sectioned, "pretrain")  # not its section
    assert (resolved.input.crop, resolved.input.augment, warned) == ("inception_crop", None, [])
    # The command line's new key wins over a config file's old one (still a warning).
    resolved, warned = _resolve_logging(caplog, old_file, overrides={"input.crop": "random_crop"})
    assert (resolved.input.crop, resolved.input.augment) == ("random_crop", None)
    assert len(warned) == 1
    # Both names, agreeing: the crop, one warning. Only the new name: no warning.
    both = {"input.augment": "none", "input.crop": "none"}
    resolved, warned = _resolve_logging(caplog, common.base_config(), overrides=both)
    assert (resolved.input.crop, resolved.input.augment, len(warned)) == ("none", None, 1)
    resolved, warned = _resolve_logging(caplog, fashion_mnist.get_config())
    assert (resolved.input.crop, resolved.input.augment, warned) == ("none", None, [])


@pytest.mark.parametrize(
    "config_values, overrides",
    [
        ({}, {"input.augment": "none", "input.crop": "random_crop"}),  # both on the command line
        ({"augment": "none", "crop": "random_crop"}, {}),  # both in the config file
    ],
)
def test_both_crop_names_disagreeing_are_left_for_the_config_check(config_values, overrides):
    """Not folded (config_checks.check_renamed refuses them: tests/test_train_errors.py)."""
    config = common.base_config()
    config.input.update(config_values)
    resolved = train_config.resolve(config, "pretrain", overrides)
    assert (resolved.input.augment, resolved.input.crop) == ("none", "random_crop")


# The trainers' resolution of the --config flag (trainers/app.py), printing the crop.
PRINT_CROP = (
    "overrides = config_flags.get_override_values(flags.FLAGS['config'])",
    "c = train_config.resolve(flags.FLAGS.config, 'pretrain', overrides)",
    "print('CROP', c.input.crop, c.input.augment)",
)


def test_the_former_crop_flag_parses_and_resolves():
    r = _config_program(PRINT_CROP, "--config.input.augment=random_crop")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "CROP random_crop None" in r.stdout
    assert "input.augment is deprecated: use --config.input.crop=random_crop" in r.stderr


def test_finetune_with_an_init_of_another_model_exits_2_naming_the_builder(tmp_path):
    import keras_vit
    from keras_vit import checkpoint

    npz = str(tmp_path / "ti16.npz")
    checkpoint.save_checkpoint(keras_vit.ViT_Ti16(image_size=32, num_classes=10), npz)
    data = str(tmp_path / "data")
    testing.make_tiny_data(data)
    r = testing.run(
        testing.trainer_cmd(
            "finetune",
            data,
            str(tmp_path / "run"),
            f"--init={npz}",
            "--strategy=default",
        )
    )
    assert r.returncode == 2, r.stderr[-3000:]
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert f"--init={npz}" in r.stderr and "--config.model=ViT_Ti16" in r.stderr, r.stderr[-3000:]
