"""The programs from any folder (docs/install.md, "The programs"): --config by an installed
recipe's name or by path (keras_vit_configs.find), `--help` printing each program's own
usage (exit 0). The demo run from an empty folder, writing only under it, is checked on
the installed wheel (.ci/wheel_check.py, `make wheel-check`)."""

import os
import subprocess
import sys

import pytest
import trainer_testing as testing

import keras_vit_configs

BIN = os.path.dirname(sys.executable)  # the console scripts of this environment
WAIT_S = 600


def test_every_recipe_is_found_by_name_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no configs/ here
    names = keras_vit_configs.names()
    assert {"fashion_mnist", "fashion_mnist_hybrid", "families"} <= set(names)
    assert "common" not in names and "augreg" not in names  # no get_config: no recipe
    for name in names:
        path = keras_vit_configs.find(name)
        assert os.path.isfile(path) and os.path.basename(path) == f"{name}.py"
        # the repository's path in the docs' commands finds the installed file too
        assert keras_vit_configs.find(f"configs/{name}.py") == path
    assert keras_vit_configs.find("families:dinov2") == keras_vit_configs.find("families") + (
        ":dinov2"
    )


def test_a_file_here_wins_and_a_wrong_name_lists_the_names(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "fashion_mnist.py").write_text("def get_config(): ...\n")
    assert keras_vit_configs.find("configs/fashion_mnist.py") == "configs/fashion_mnist.py"
    assert keras_vit_configs.find("configs/fashion_mnist.py:x") == "configs/fashion_mnist.py:x"
    for wrong in ("fashion_mnst", "configs/nope.py", "elsewhere/fashion_mnist.py"):
        with pytest.raises(keras_vit_configs.ConfigNotFound) as error:
            keras_vit_configs.find(wrong)
        message = str(error.value)
        assert message.startswith(f"--config={wrong}: no such file nor installed config")
        assert "fashion_mnist_hybrid" in message and "\n" not in message
    assert keras_vit_configs.run_name("families:dinov2") == "families_dinov2"
    assert keras_vit_configs.run_name("/x/configs/fashion_mnist.py") == "fashion_mnist"


# (console script, what its usage must show)
HELP = {
    "keras-vit-pretrain": ("keras-vit-pretrain --config=", "Example", "--model_dir"),
    "keras-vit-finetune": ("keras-vit-finetune --config=", "Example", "--init"),
    "keras-vit-demo": ("keras-vit-demo", "Example", "--steps=2"),
    "keras-vit-make-tfrecords": (
        "--source=folder:PATH",
        "python -m keras_vit_tools.make_tfrecords",
        "--output_dir",
    ),
}


@pytest.mark.parametrize("script", list(HELP))
def test_help_prints_the_programs_usage_and_exits_0(script, tmp_path):
    result = subprocess.run(
        [os.path.join(BIN, script), "--help"],
        cwd=tmp_path,
        env=testing.env(),
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for expected in HELP[script]:
        assert expected in result.stdout, (expected, result.stdout)
    assert os.listdir(tmp_path) == []
