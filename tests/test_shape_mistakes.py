"""Sizes the layers would refuse are a config mistake: one line naming the flags, exit 2,
nothing written (trainers/config_checks.check_shapes), by the model's own rules, so
that the check and the model cannot disagree. KERAS_VIT_TRACEBACK=1 shows the traceback
of such a one-line error too (cli/console.fail)."""

import contextlib
import copy
import os
import sys

import keras
import pytest
import trainer_testing as testing
from test_train_errors import NOT_BUILT

import keras_vit
from keras_vit_cli import commands, console
from keras_vit_configs import fashion_mnist, fashion_mnist_hybrid
from keras_vit_trainers import config_checks, train_config

WAIT_S = 300

# (recipe, --config overrides, the start of the error, the model arguments that build it)
CASES = {
    "heads": (
        fashion_mnist,
        {"model.hidden_size": 30, "model.num_heads": 4},
        "--config.model.hidden_size=30 and --config.model.num_heads=4: hidden size 30 is "
        "not divisible by 4 heads (give a number of heads that divides 30 (1, 2, 3, 5, 6, "
        "10, 15, 30) with --config.model.num_heads)",
    ),
    "patch": (
        fashion_mnist,
        {"model.patch_size": 5},
        "--config.model.patch_size=5 and --config.image_size=28: image size 28x28 is not a "
        "multiple of the patch size 5x5 (give a patch size that divides 28 (1, 2, 4, 7, 14, "
        "28) with --config.model.patch_size",
    ),
    "hybrid patch": (
        fashion_mnist_hybrid,
        {"model.patch_size": 3},
        "--config.model.resnet={'num_layers': (1, 1), 'width_factor': 0.5}, "
        "--config.model.patch_size=3 and --config.image_size=28: image size 28x28 gives a "
        "ResNet feature map of 4x4, not a multiple of the patch size 3x3 (give a patch size "
        "that divides 4 (1, 2, 4)",
    ),
    "builder patch": (
        fashion_mnist,
        {"model": "ViT_Ti16"},
        "ViT_Ti16's patch_size=16 and --config.image_size=28: image size 28x28 is not a "
        "multiple of the patch size 16x16",
    ),
    "registers": (
        fashion_mnist,
        {"model.num_registers": -1},
        "--config.model / --config.model_overrides: num_registers must be an int >= 0",
    ),
    "ResNet stages": (
        fashion_mnist_hybrid,
        {"model.resnet.num_layers": (0,)},
        "--config.model / --config.model_overrides: resnet num_layers must be positive",
    ),
    "map head": (
        fashion_mnist,
        {"model.num_heads": 3, "model_overrides.classifier": "map"},
        "--config.model.hidden_size=128 and --config.model.num_heads=3: hidden size 128 is "
        "not divisible by 3 heads",
    ),
}


def _resolved(recipe, overrides):
    # A copy: fashion_mnist_hybrid's model holds its module's ResNet dicts themselves.
    return train_config.resolve(copy.deepcopy(recipe.get_config()), "pretrain", overrides)


def _model(config):
    """The model the trainer would build from `config` (a tiny depth: the sizes are the
    config's)."""
    spec = config.model.to_dict() if hasattr(config.model, "to_dict") else config.model
    overrides = {k: v for k, v in config.model_overrides.items() if v is not None}
    if isinstance(spec, str):
        return keras_vit.build_model(spec, num_layers=1, image_size=config.image_size, **overrides)
    return keras_vit.build_model(
        {**spec, **overrides, "num_layers": 1, "image_size": config.image_size}
    )


@pytest.mark.parametrize("name", list(CASES))
def test_a_size_the_model_refuses_is_refused_first_in_one_line(name):
    recipe, overrides, start = CASES[name]
    config = _resolved(recipe, overrides)
    with pytest.raises(config_checks.ConfigError) as error:
        config_checks.check_shapes(config)
    message = str(error.value)
    assert message.startswith(start) and "\n" not in message, message
    # The model refuses the same sizes, with the rule's own words.
    with pytest.raises(ValueError) as refused:
        _model(config)
    rule = str(refused.value).strip().splitlines()[0].split(": ", 1)[-1].rstrip(".")
    assert rule in message, (rule, message)


@pytest.mark.parametrize("recipe", [fashion_mnist, fashion_mnist_hybrid])
def test_the_shipped_sizes_pass(recipe):
    config = _resolved(recipe, {})
    config_checks.check_shapes(config)
    assert _model(config).count_params() > 0


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(folder)
    return folder


ISSUE_CASES = {  # the issue's two command lines
    "heads": ["--config.model.hidden_size=30", "--config.model.num_heads=4"],
    "patch": ["--config.model.patch_size=5"],
}


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="a TensorFlow program")
def test_the_trainer_exits_2_with_one_line_and_writes_nothing(data, tmp_path):
    """Both cases, and the first again with KERAS_VIT_TRACEBACK=1: its traceback, then
    the same line."""
    runs = {}
    with contextlib.ExitStack() as stack:
        for name, flags in [*ISSUE_CASES.items(), ("traceback", ISSUE_CASES["heads"])]:
            model_dir = str(tmp_path / name / "run")
            cmd = commands.trainer_command(
                "pretrain", "configs/fashion_mnist.py", data, model_dir, *flags
            )
            env = testing.env()
            env.pop(console.TRACEBACK_ENV, None)
            if name == "traceback":
                env[console.TRACEBACK_ENV] = "1"
            process = stack.enter_context(
                testing.started([testing.PY, "-c", NOT_BUILT, *cmd[1:]], env=env)
            )
            runs[name] = (process, model_dir)
        results = {
            name: (p.communicate(timeout=WAIT_S)[1], p.returncode, d)
            for name, (p, d) in runs.items()
        }
    lines = {}
    for name, (err, code, model_dir) in results.items():
        assert code == 2, err[-3000:]
        assert "MODEL BUILT" not in err and not os.path.exists(model_dir), err[-3000:]
        nonempty = [line for line in err.splitlines() if line.strip()]
        assert nonempty[-1].startswith("error: "), err[-3000:]
        assert sum(line.startswith("error: ") for line in nonempty) == 1, err[-3000:]
        assert ("Traceback" in err) == (name == "traceback"), err[-3000:]
        lines[name] = nonempty[-1]
    assert lines["heads"] == lines["traceback"]
    assert lines["heads"].startswith("error: " + CASES["heads"][2])
    assert lines["patch"].startswith("error: " + CASES["patch"][2])
    assert "ConfigError" in results["traceback"][0]  # the traceback of the error itself


def _fail_output(capsys, monkeypatch, traceback, raising):
    if traceback:
        monkeypatch.setenv(console.TRACEBACK_ENV, "1")
    else:
        monkeypatch.delenv(console.TRACEBACK_ENV, raising=False)
    with pytest.raises(SystemExit) as exited:
        if raising:
            try:
                raise ValueError("the cause")
            except ValueError:
                console.fail("the line", 2)
        else:
            console.fail("the line", 2)
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.rstrip().splitlines()[-1] == "error: the line"
    return err


@pytest.mark.parametrize("raising", [True, False], ids=["in an except clause", "a check"])
def test_fail_shows_a_traceback_only_when_asked(capsys, monkeypatch, raising):
    assert "Traceback" not in _fail_output(capsys, monkeypatch, False, raising)
    err = _fail_output(capsys, monkeypatch, True, raising)
    if raising:  # the exception being handled
        assert "Traceback" in err and "ValueError: the cause" in err
    else:  # where the program found the mistake
        assert __name__.split(".")[-1] in err and "_fail_output" in err, err
    assert sys.exc_info()[0] is None


# Other programs' one-line errors (cli/console.fail through run_app, and the demo's own):
# (command, the error line's start).
OTHER_PROGRAMS = {
    "make_tfrecords": (
        commands.tool_command(
            "make_tfrecords", "--source=folder:{missing}", "--output_dir={missing}_out"
        ),
        "error: --source=folder:{missing}: no such directory",
    ),
    "demo": (
        commands.tool_command("demo", "--config=no_such_recipe", "--data_dir={missing}"),
        "error: --config=no_such_recipe: no such file nor installed config",
    ),
}


@pytest.mark.parametrize("program", list(OTHER_PROGRAMS))
def test_every_program_shows_the_traceback_when_asked(program, tmp_path):
    missing = str(tmp_path / "missing")
    command, start = (
        [a.replace("{missing}", missing) for a in OTHER_PROGRAMS[program][0]],
        OTHER_PROGRAMS[program][1].replace("{missing}", missing),
    )
    errs = {}
    with contextlib.ExitStack() as stack:
        started = {}
        for asked in (False, True):
            env = testing.env()
            env.pop(console.TRACEBACK_ENV, None)
            if asked:
                env[console.TRACEBACK_ENV] = "1"
            started[asked] = stack.enter_context(testing.started(command, env=env, cwd=tmp_path))
        for asked, process in started.items():
            errs[asked] = process.communicate(timeout=WAIT_S)[1]
            assert process.returncode == 2, errs[asked][-3000:]
    for asked, err in errs.items():
        last = [line for line in err.splitlines() if line.strip()][-1]
        assert last.startswith(start), err[-3000:]
        assert ("Traceback (most recent call last)" in err) == asked, err[-3000:]
    assert os.listdir(tmp_path) == []
