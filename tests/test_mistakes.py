"""Every user mistake ends in one line, in every program (cli/console.py's error path).

A table of mistakes, each run through its program as a real subprocess (all started at
once, waits bounded): the exit code (2 for a flag or config value, 1 for a failure while
running: a download), stderr's last non-empty line `error: ...` and the only such line,
no traceback, no model built (the trainers), and nothing left where the program would
write. Offline is forced: downloads go through a proxy that refuses (127.0.0.1:9) into an
empty cache.
"""

import contextlib
import os

import keras
import numpy as np
import pytest
import trainer_testing as testing
from test_train_errors import NOT_BUILT

from keras_vit_cli import commands, console

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the programs are TensorFlow programs"
)

WAIT_S = 300  # the bound on each wait (15 programs share 2 cores)


def _trainer(trainer, data, out, *flags, config="configs/fashion_mnist.py"):
    """A trainer command whose `train_lib.build` exits 99 (NOT_BUILT)."""
    cmd = testing.trainer_cmd(trainer, data, os.path.join(out, "run"), *flags, config=config)
    return [testing.PY, "-c", NOT_BUILT, *cmd[1:]]


def _tool(tool, *flags):
    return commands.tool_command(tool, *flags)


def _mistakes(data, out, grey):
    """{name: (command, exit code, the error line's start, [paths left unwritten])}."""
    j = lambda *p: os.path.join(out, *p)  # noqa: E731
    run = j("run")
    return {
        "config file": (
            _trainer("pretrain", data, out, config="configs/nonexistent.py"),
            2,
            "--config=configs/nonexistent.py: no such file nor installed config (give a "
            "config file's path, or one of ",
            [run],
        ),
        "batch 0": (
            _trainer("pretrain", data, out, "--strategy=default", "--config.batch_size=0"),
            2,
            "--config.batch_size=0: expected a positive integer",
            [run],
        ),
        "hidden -5": (
            _trainer("pretrain", data, out, "--strategy=default", "--config.model.hidden_size=-5"),
            2,
            "--config.model.hidden_size=-5: expected a positive integer",
            [run],
        ),
        "missing data": (
            _trainer("pretrain", j("nodata"), out, "--strategy=default"),
            2,
            f"--data_dir={j('nodata')}: no such directory. Create it with "
            f"`python tools/make_tfrecords.py --output_dir={j('nodata')}`.",
            [run],
        ),
        "empty data": (  # the case's folder is empty when the trainer starts
            _trainer("pretrain", out, out, "--strategy=default"),
            2,
            f"--data_dir={out}: no manifest.json (and no .tfrecord shards)",
            [run],
        ),
        "tpu without one": (  # TPU_NAME is empty in the table's environment
            _trainer("pretrain", data, out, "--strategy=tpu"),
            2,
            "--strategy=tpu but no TPU was given or found",
            [run],
        ),
        # Found by making what the config describes (the optimizer on its schedule),
        # still before the model and before anything is written.
        "schedule": (
            _trainer(
                "pretrain",
                data,
                out,
                "--config.warmup_steps=50",
                "--config.total_steps=20",
                "--strategy=default",
            ),
            2,
            "--config.total_steps=20 must exceed warmup_steps=50; give a smaller "
            "--config.warmup_steps or a larger --config.total_steps",
            [run],
        ),
        "jit on replicas": (
            _trainer(
                "pretrain",
                data,
                out,
                "--config.jit_compile=True",
                "--strategy=mirrored",
                "--cpu_replicas=2",
            ),
            2,
            "--config.jit_compile=True: XLA cannot train 2 replicas on CPUs under the "
            "mirrored strategy",
            [run],
        ),
        # A key of a dict model given to a builder-name config (cifar10's ViT_B16;
        # testing.TINY sets --config.model.hidden_size): ml_collections rejects it while
        # parsing the flags.
        "builder key": (
            _trainer("pretrain", data, out, config="configs/cifar10.py"),
            2,
            "--config.model.hidden_size: config.model is the builder name 'ViT_B16', which "
            "has no keys; give --config.model=\"{'variant': 'ViT_B16', 'hidden_size': ...}\" "
            "(a dict model)",
            [run],
        ),
        "finetune offline": (
            commands.trainer_command(  # a ViT-B/16 (TINY's sizes left out)
                "finetune",
                "configs/fashion_mnist.py",
                data,
                run,
                "--strategy=default",
                "--init=imagenet21k",
                "--config.model=ViT_B16",
                "--config.image_size=32",
            ),
            1,
            "cannot download https://",
            [run],
        ),
        "finetune unknown init": (  # one line and no run directory (built, then refused)
            commands.trainer_command(
                "finetune",
                "configs/fashion_mnist.py",
                data,
                run,
                "--strategy=default",
                "--init=imagenet22k",
            ),
            2,
            "--init=imagenet22k: weights='imagenet22k' is neither an existing file nor a "
            "registered checkpoint name",
            [run],
        ),
        "finetune no init": (
            _trainer("finetune", data, out, "--strategy=default", "--init=" + j("no.npz")),
            2,
            f"--init={j('no.npz')}",
            [run],
        ),
        "make_tfrecords": (
            _tool(
                "make_tfrecords", f"--output_dir={j('records')}", f"--fashion_mnist_dir={j('no')}"
            ),
            2,
            "Fashion-MNIST IDX file(s) missing",
            [j("records")],
        ),
        "export_savedmodel offline": (
            _tool(
                "export_savedmodel",
                "--model=ViT_B16",
                "--weights=imagenet21k",
                f"--output={j('sm')}",
            ),
            1,
            "cannot download https://",
            [j("sm")],
        ),
        "export_savedmodel run_dir": (
            _tool("export_savedmodel", f"--run_dir={j('norun')}", f"--output={j('sm2')}"),
            2,
            f"--run_dir={j('norun')}",
            [j("sm2")],
        ),
        "export_tflite": (
            _tool("export_tflite", f"--saved_model={j('nosm')}", f"--output={j('m.tflite')}"),
            2,
            f"--saved_model={j('nosm')}: no such directory",
            [j("m.tflite")],
        ),
        "fewshot": (
            _tool("fewshot", f"--run_dir={j('norun')}", f"--data_dir={data}"),
            2,
            f"--run_dir={j('norun')}",
            [],
        ),
        "fewshot output_json": (  # checked before the model is loaded
            _tool(
                "fewshot",
                f"--run_dir={j('norun')}",
                f"--data_dir={data}",
                "--output_json=/dev/null/x.json",
            ),
            2,
            "--output_json=/dev/null/x.json: cannot write there",
            [],
        ),
        "visualize": (
            _tool(
                "visualize",
                f"--run_dir={j('norun')}",
                f"--data_dir={data}",
                f"--output_dir={j('f')}",
            ),
            2,
            f"--run_dir={j('norun')}",
            [j("f")],
        ),
        "serve_request": (
            _tool("serve_request", "--signature=nope", f"--request={j('req.json')}", grey),
            2,
            "--signature=nope: not an exported signature",
            [j("req.json")],
        ),
        "convert_checkpoint": (
            _tool(
                "convert_checkpoint",
                "--model=ViT_Ti16",
                f"--weights={j('no.npz')}",
                f"--output={j('out.keras')}",
            ),
            2,
            "",
            [j("out.keras")],
        ),
        "demo": (
            [
                *commands.tool_command("demo"),
                "--config=configs/nonexistent.py",
                f"--data_dir={data}",
                f"--model_dir={run}",
            ],
            2,
            "--config=configs/nonexistent.py: no such file nor installed config",
            [run],
        ),
        "onnx benchmark": (
            [
                testing.PY,
                os.path.join(commands.ROOT, "benchmarks", "onnx.py"),
                "--models=nope",
                f"--json={j('bench', 'x.json')}",
            ],
            2,
            "--models=nope: no model nope",
            [j("bench")],
        ),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{name: (process, code, line start, paths)}, all started at once."""
    data = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(data)
    grey = str(tmp_path_factory.mktemp("images") / "grey.png")
    from PIL import Image

    Image.fromarray(np.zeros((28, 28), np.uint8)).save(grey)
    cache = str(tmp_path_factory.mktemp("cache"))
    env = testing.env(
        https_proxy="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        KERAS_VIT_CACHE_DIR=cache,
        KERAS_VIT_DOWNLOAD_TIMEOUT="10",
        TPU_NAME="",
    )
    env.pop(console.TRACEBACK_ENV, None)
    table = {
        name: (cmd, code, start, paths, str(tmp_path_factory.mktemp("out")))
        for name, (cmd, code, start, paths) in _mistakes(data, "{out}", grey).items()
    }
    with contextlib.ExitStack() as stack:
        started = {}
        for name, (cmd, code, start, paths, out) in table.items():
            fill = lambda s, out=out: s.replace("{out}", out)  # noqa: E731
            process = stack.enter_context(
                testing.started([fill(a) for a in cmd], env=env, cwd=commands.ROOT)
            )
            started[name] = (process, code, fill(start), [fill(p) for p in paths])
        yield started


def _error_line(process, code):
    """The process's one `error:` line (its last non-empty line), after checking the exit
    code, no traceback and no model built."""
    _, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == code, err[-3000:]
    assert "Traceback" not in err and "MODEL BUILT" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error: "), err[-3000:]
    assert sum(line.startswith("error: ") for line in lines) == 1, err[-3000:]
    assert "USAGE:" not in err and "--helpfull" not in err, err[-3000:]  # no usage text
    return lines[-1][len("error: ") :]


@pytest.mark.parametrize("name", list(_mistakes("D", "{out}", "G")))
def test_a_mistake_is_one_line_and_leaves_nothing(runs, name):
    process, code, start, paths = runs[name]
    assert _error_line(process, code).startswith(start)
    for path in paths:
        assert not os.path.exists(path), path


# --- the parts, in-process -----------------------------------------------------------------


def test_the_exit_code_says_usage_or_runtime():
    from keras_vit.checkpoint import download
    from keras_vit_data import records
    from keras_vit_trainers import config_checks

    assert console.user_error(config_checks.ConfigError("x")) == console.USAGE
    assert console.user_error(records.DataError("x")) == console.USAGE
    assert console.user_error(FileNotFoundError(2, "No such file", "/x")) == console.USAGE
    assert console.user_error(download.DownloadError("x")) == console.RUNTIME
    assert console.user_error(console.UserError("x", console.RUNTIME)) == console.RUNTIME
    assert console.user_error(ZeroDivisionError()) is None  # a bug: its traceback shows
    assert console.user_error(KeyError("x")) is None


def test_the_line_names_the_file_and_is_one_line():
    assert console.error_line(FileNotFoundError(2, "No such file or directory", "/x/y")) == (
        "/x/y: No such file or directory"
    )
    assert console.error_line(ValueError("first\n  second\n")) == "first second"


def test_a_failed_start_removes_only_the_run_directory_it_made(tmp_path):
    from keras_vit_trainers import app

    new = tmp_path / "new"
    remove = app._remover(str(new))
    (new / "checkpoints").mkdir(parents=True)
    (new / "checkpoints" / "plan.json").write_text("{}")
    (new / "config.json").write_text("{}")
    remove()
    assert not new.exists()

    trained = tmp_path / "trained"
    remove = app._remover(str(trained))
    (trained / "checkpoints").mkdir(parents=True)
    (trained / "checkpoints" / "latest.weights.h5").write_text("")
    remove()
    assert trained.exists()  # a checkpoint: not only a start's files

    resumed = tmp_path / "resumed"
    (resumed / "checkpoints").mkdir(parents=True)
    remove = app._remover(str(resumed))  # there before the run started: never removed
    remove()
    assert resumed.exists()


def test_the_split_the_data_has_is_taken(tmp_path, caplog):
    from keras_vit_tools import inspect_io

    (tmp_path / "train-00000-of-00001.tfrecord").write_text("")
    (tmp_path / "validation-00000-of-00001.tfrecord").write_text("")
    assert inspect_io.data_split(str(tmp_path), "test", "--split", False) == "validation"
    assert inspect_io.data_split(str(tmp_path), "test", "--split", True) == "test"  # as given
    (tmp_path / "validation-00000-of-00001.tfrecord").unlink()
    with pytest.raises(FileNotFoundError, match=r"no test or validation split \(it has train;"):
        inspect_io.data_split(str(tmp_path), "test", "--test_split", False)


def test_an_output_folder_is_made_and_checked_before_the_work(tmp_path):
    """console.check_output, which benchmarks/onnx.py calls on --json first."""
    console.check_output(str(tmp_path / "new" / "x.json"), "--json")
    assert (tmp_path / "new").is_dir()
    (tmp_path / "file").write_text("")
    with pytest.raises(console.UserError, match="--json="):
        console.check_output(str(tmp_path / "file" / "x.json"), "--json")
    source = open(os.path.join(commands.ROOT, "benchmarks", "onnx.py")).read()
    assert 'console.check_output(FLAGS.json, "--json")' in source
