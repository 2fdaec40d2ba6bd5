"""tools/convert_checkpoint.py: one run of the command end to end, and its `convert`
(what the command runs) in this process for the other cases."""

import importlib.util
import json
import os
import sys

import keras
import numpy as np
import pytest
import trainer_testing as testing
from absl import flags
from numpy_vit import random_params, vit_forward

import keras_vit
from keras_vit import run_directory

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = os.path.join(ROOT, "tools", "convert_checkpoint.py")
MODEL = json.dumps(dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2))


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """(directory, params, path) of a random official-layout checkpoint."""
    directory = tmp_path_factory.mktemp("convert")
    params = random_params(
        patch=8, hidden=16, mlp=32, heads=2, layers=2, grid=(4, 4), num_classes=3, seed=11
    )
    np.savez(directory / "ckpt.npz", **params)
    return directory, params, directory / "ckpt.npz"


@pytest.fixture(scope="module")
def command(checkpoint):
    """The command's run to a .weights.h5 at another resolution, started at the
    module's first test so that its TensorFlow start-up overlaps the in-process
    checks; killed at the module's end if still running."""
    directory, _, npz = checkpoint
    cmd = [
        sys.executable,
        TOOL,
        f"--model={MODEL}",
        f"--weights={npz}",
        f"--output={directory / 'vit.weights.h5'}",
        "--image_size=48",
    ]
    with testing.started(cmd) as process:
        yield process


@pytest.fixture(scope="module")
def tool():
    """The tool's module, imported here. Its flags (three of them required) are
    taken out of absl's global registry afterwards: left there, they would fail any
    later parse of other flags in this process."""
    spec = importlib.util.spec_from_file_location("convert_checkpoint", TOOL)
    module = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # absl files its flags under the module's name
    yield module
    for flag in flags.FLAGS.get_flags_for_module(spec.name):
        delattr(flags.FLAGS, flag.name)
    del sys.modules[spec.name]


def test_npz_to_keras_and_weights_h5(checkpoint, command, tool, rng):
    directory, params, npz = checkpoint
    out = directory / "vit.keras"
    tool.convert(tool.model_spec(MODEL), str(npz), str(out))
    model = keras.saving.load_model(out, safe_mode=True)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(
        model.predict(x, verbose=0), vit_forward(params, x, num_layers=2), atol=1e-5
    )

    stdout, stderr = command.communicate(timeout=300)
    assert command.returncode == 0, stderr[-2000:]
    config = json.loads((directory / "vit.config.json").read_text())
    assert config["image_size"] == [48, 48]
    rebuilt = keras_vit.VisionTransformer.from_config(config)
    parameters = f"{rebuilt.count_params():,} parameters, 48x48 px."
    assert f"Wrote {directory / 'vit.weights.h5'}: vit, {parameters}" in stdout
    rebuilt.load_weights(directory / "vit.weights.h5")
    x = rng.uniform(-1, 1, (1, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(
        rebuilt.predict(x, verbose=0), vit_forward(params, x, num_layers=2), atol=1e-5
    )


def test_bad_weights_and_bad_output_suffix(checkpoint, tool):
    directory, _, npz = checkpoint
    spec = tool.model_spec(MODEL)
    with pytest.raises(FileNotFoundError, match="missing.npz"):
        tool.convert(spec, str(directory / "missing.npz"), str(directory / "x.keras"))
    with pytest.raises(ValueError, match=r"--output must end in .keras, .weights.h5 or .npz"):
        tool.convert(spec, str(npz), str(directory / "vit.h5"))


def test_a_run_directory_needs_no_model(tool, tmp_path, rng):
    """--weights=RUN alone: the run's model_config.json names the model (a 3-class
    32-px ViT here), written to timm's layout with the run's weights."""
    model = keras_vit.VisionTransformer(
        image_size=32,
        num_classes=3,
        patch_size=8,
        hidden_size=16,
        mlp_dim=32,
        num_heads=2,
        num_layers=1,
        name="three_classes",
    )
    model.set_weights([w + rng.normal(0, 0.1, w.shape) for w in model.get_weights()])
    run = tmp_path / "run"
    run_directory.RunDirectory(str(run)).write_model(model)
    spec = tool.source_spec(None, str(run), str(tmp_path / "timm"))
    converted = tool.convert(spec, str(run), str(tmp_path / "timm"), "timm")
    assert (tmp_path / "timm" / "model.safetensors").is_file()
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(converted.predict(x, verbose=0), model.predict(x, verbose=0))


def test_usage_mistakes_are_one_error_line(tool, checkpoint, tmp_path, capsys):
    _, _, npz = checkpoint
    for args, message in (
        ((None, str(npz), "x.keras"), f"--weights={npz} is not a run directory"),
        ((MODEL, None, "x.keras"), "--weights is required"),
        ((MODEL, str(npz), None), "--output is required"),
        (("{bad", str(npz), "x.keras"), "--model={bad: not a JSON object"),
    ):
        with pytest.raises(tool.console.UserError, match=message) as raised:
            tool.source_spec(*args)
        assert raised.value.code == 2
    # absl's own mistakes (an unknown flag, a value outside the choices): exit 2, one line.
    for argv in (["prog", "--format=onnx"], ["prog", "--no_such_flag=1"]):
        with pytest.raises(SystemExit) as exited:
            tool.parse_flags(argv)
        assert exited.value.code == 2
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), lines
    flags.FLAGS.unparse_flags()
