"""trainers/train_config.resolve: defaults from configs/common.py, the mode's section,
and the command line, which always wins; and the trainer's exit on an --init that
does not fit the config."""

import pytest
from keras_vit_configs import common, fashion_mnist
from keras_vit_trainers import train_config
import trainer_testing as testing


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


def test_config_flag_accepts_a_builder_name_for_a_dict_model():
    r = testing.run(
        [
            testing.PY,
            "-c",
            "from absl import app, flags\n"
            "from ml_collections import config_flags\n"
            "config_flags.DEFINE_config_file('config', None, '', lock_config=False)\n"
            "def main(_):\n"
            "    print('MODEL', flags.FLAGS.config.model)\n"
            "app.run(main)\n",
            "--config=configs/fashion_mnist.py",
            "--config.model=ViT_Ti16",
        ]
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "MODEL ViT_Ti16" in r.stdout


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
