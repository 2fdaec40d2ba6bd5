"""What our commands print: our own lines and a progress bar, none of the libraries'."""

import io
import json
import os
import re
import subprocess
import sys

import keras
import pytest

# Lines that TensorFlow, absl, XLA, oneDNN and TFLite print about themselves (seen in
import trainer_testing as testing

from keras_vit_cli import console

# `make demo` before cli/console.py existed), as the user would grep for them.
NOISE = [
    r"cross_device_ops\.py",  # "Reduce to /device:CPU:0 then broadcast"
    r"unsupported characters",  # SavedModel's generated input names
    r"oneDNN custom operations",  # the oneDNN banner
    r"absl::InitializeLog",
    r"cpu_feature_guard|rebuild TensorFlow with the appropriate compiler flags",
    r"XNNPACK delegate",
    r"^[IW]\d{4} \d\d:\d\d:\d\d",  # any absl/glog INFO or WARNING line
    r"UserWarning|DeprecationWarning|FutureWarning",
]


def _noise(text):
    return [
        line for line in text.splitlines() if any(re.search(pattern, line) for pattern in NOISE)
    ]


def _quiet_env():
    env = testing.env()
    for name in ("TF_CPP_MIN_LOG_LEVEL", console.VERBOSITY_ENV, "KERAS_VIT_STDERR_FILTERED"):
        env.pop(name, None)
    return env


def _run(cmd, **extra_env):
    return subprocess.run(
        cmd,
        cwd=testing.ROOT,
        env={**_quiet_env(), **extra_env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_filter_drops_library_lines_and_keeps_the_rest():
    dropped = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1796115623.599760    5852 port.cc:153] oneDNN custom operations are on.",
        "W1201 09:10:11.123456 140000 cross_device_ops.py:619] Reduce to /device:CPU:0",
        "INFO: Created TensorFlow Lite XNNPACK delegate for CPU.",
        "fully_quantize: 0, inference_type: 6, input_inference_type: UINT8, "
        "output_inference_type: FLOAT32",
        "E0000 00:00:1796129078.895596    8156 util.cc:131] oneDNN supports DT_INT64 only on "
        "platforms with AVX-512. Falling back to the default Eigen-based implementation if "
        "present.",
    ]
    kept = [
        "E0000 00:00:1796129078.895596    8156 util.cc:131] oneDNN failed: another error stays",
        "E0000 00:00:1796115623.599760    5852 cuda.cc:1] a C++ error stays",
        "F0000 00:00:1796115623.599760    5852 check.cc:1] Check failed: a fatal line stays",
        "Traceback (most recent call last):",
        "09:00:01 test accuracy: 0.91",
        "training: 10/20 steps (50%), 1000 images/s, elapsed 0:01, ETA 0:01",
    ]
    assert all(console.dropped_line(line) for line in dropped)
    assert not any(console.dropped_line(line) for line in kept)


def test_progress_without_terminal_prints_plain_lines():
    stream = io.StringIO()
    bar = console.Progress(
        10, "training", initial=2, scale=4, scale_unit="image", stream=stream, every_seconds=3600
    )
    for _ in range(8):
        bar.update(1, loss=0.5)
    bar.close()
    lines = stream.getvalue().splitlines()
    # Throttled to one line per hour: only the final one, no carriage returns.
    assert len(lines) == 1 and "\r" not in stream.getvalue()
    assert lines[0].startswith("training: 10/10 steps (100%), ") and "images/s" in lines[0]
    assert "loss 0.5" in lines[0] and "ETA 0:00" in lines[0]


def test_progress_on_a_terminal_is_a_live_bar():
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stream = Terminal()
    with console.Progress(5, "few-shot features", unit="image", stream=stream) as bar:
        for _ in range(5):
            bar.update(1)
    assert "\r" in stream.getvalue() and "5/5" in stream.getvalue()


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
def test_training_and_export_print_only_our_lines(tmp_path):
    """A short mirrored training (2 CPU replicas, as `make demo`) and the two exports of
    its model: no library line at the default verbosity; KERAS_VIT_VERBOSITY=library
    brings them back."""
    data = str(tmp_path / "data")
    testing.make_tiny_data(data, n_train=64, n_test=32, per_shard=32)
    run_dir = str(tmp_path / "run")
    train = _run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--config.total_steps=4",
            "--config.checkpoint_every=2",
            "--strategy=mirrored",
            "--cpu_replicas=2",
            "--config.evals.test.every=2",
        )
    )
    assert train.returncode == 0, train.stderr[-3000:]
    output = train.stdout + train.stderr
    assert not _noise(output), _noise(output)
    assert re.search(r"^training: 4/4 steps \(100%\), \d+ images/s", output, re.M), output
    assert "test accuracy:" in output
    # evals.test.every=2: the test split evaluated at steps 2 and 4, and the learning curve drawn.
    evals = [json.loads(line) for line in open(os.path.join(run_dir, "eval_log.jsonl"))]
    assert [e["step"] for e in evals] == [2, 4] and all(0 <= e["accuracy"] <= 1 for e in evals)
    with open(os.path.join(run_dir, "learning_curve.png"), "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    assert json.load(open(os.path.join(run_dir, "metrics.json")))["learning_curve"].endswith(
        "learning_curve.png"
    )

    saved_model = str(tmp_path / "saved_model" / "1")
    tflite = str(tmp_path / "model.tflite")
    for cmd in (
        [
            sys.executable,
            "tools/export_savedmodel.py",
            f"--run_dir={run_dir}",
            f"--output={saved_model}",
            f"--class_names={data}/manifest.json",
        ],
        [
            sys.executable,
            "tools/export_tflite.py",
            f"--saved_model={saved_model}",
            "--quantization=float16",
            f"--output={tflite}",
            f"--eval_data={data}/test-*",
            "--num_eval_images=16",
            "--latency_repeats=2",
            f"--report={tmp_path / 'report.json'}",
        ],
    ):
        result = _run(cmd)
        assert result.returncode == 0, result.stderr[-3000:]
        assert not _noise(result.stdout + result.stderr), _noise(result.stdout + result.stderr)
        assert result.stdout.startswith("Wrote "), result.stdout
    assert os.path.getsize(tflite) > 0

    loud = _run(
        [
            sys.executable,
            "-c",
            "from keras_vit_cli import console; console.setup(); "
            "import tensorflow as tf; tf.constant(1.0) + 1",
        ],
        KERAS_VIT_VERBOSITY="library",
        PYTHONPATH=testing.ROOT,
    )
    # TensorFlow's own start-up lines come back; which ones depends on the CPU (the oneDNN
    # banner where TensorFlow turns oneDNN on, AVX-512 kinds; the CPU-feature line on AVX2).
    assert loud.returncode == 0 and _noise(loud.stderr), loud.stderr


def test_warnings_show_from_our_modules_only(monkeypatch):
    import warnings

    monkeypatch.setattr(warnings, "filters", list(warnings.filters))  # restored after
    console.show_only_our_warnings()  # what console.setup() does for warnings
    for module, shown in (
        ("keras_vit_trainers.faults", True),
        ("keras_vit_data.writer", True),
        ("keras_vit.checkpoint", True),
        ("trainers.app", True),
        (keras.Model.__module__, False),  # where Keras' own warnings come from
        ("tensorflow.python.ops", False),
        ("keras_vitamins", False),
    ):
        with warnings.catch_warnings(record=True) as caught:
            warnings.warn_explicit("w", UserWarning, "f.py", 1, module=module, registry={})
        assert bool(caught) == shown, module
