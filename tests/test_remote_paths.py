"""A whole journey on a filesystem that is not the local disk: TensorFlow's `ram://`
(in memory, one per process, so everything runs in this process, through the
programs' Python entry points). Records are written to ram://data, a pre-training
run goes to ram://run, is killed after its first checkpoint and resumes from it,
its evaluators run, a fine-tune model is built and loaded from it (--init=RUN), and
the model is exported (SavedModel, TFLite with its report) under ram://export;
tools/make_tfrecords.py also reads an image folder on ram:// into records there.

The guard (`local_calls_fail`) makes any local-only file call on a ram:// path
fail, naming the call: Python's own opens, mkdir, listdir, remove, rename, ...
(audit events), `os.stat` (os.path.exists/isdir/isfile/getsize) and `h5py.File`.
`tf.io.gfile` and Keras' remote-path handling do not go through them, so every
call the guard sees is one that would break on gs://."""

import contextlib
import importlib
import json
import logging
import os
import sys

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing

from keras_vit.run_directory import RunDirectory

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

DATA, RUN, EXPORT = "ram://data", "ram://run", "ram://export"


class LocalCallOnRemotePath(AssertionError):
    """A local-only file call (Python's open, os.stat, h5py, ...) on a ram:// path."""


# The audit events of local file operations (https://docs.python.org/3/library/audit_events.html).
AUDITED = {
    "open",
    "os.mkdir",
    "os.listdir",
    "os.scandir",
    "os.remove",
    "os.rmdir",
    "os.rename",
    "os.chmod",
    "os.truncate",
    "os.utime",
    "shutil.copyfile",
    "shutil.copytree",
    "shutil.move",
    "shutil.rmtree",
    "glob.glob",
    "glob.glob/2",
    "tempfile.mkstemp",
}
_guard = {"on": False, "calls": []}

# Local calls on a remote path that are harmless, by (the caller's file, function):
# Keras' `save_weights` asks `os.path.exists(filepath)` only to prompt before an
# overwrite (False on ram://: no prompt, and every caller here overwrites), then
# writes through its own remote handling (a local temp file copied by gfile).
# TensorFlow's checkpoint writer globs its own output locally to record its size in a
# metric (0 on ram://, and the write itself goes through TensorFlow's file systems).
HARMLESS = {
    (os.path.join("keras", "src", "saving", "saving_api.py"), "save_weights"),
    (os.path.join("tensorflow", "python", "checkpoint", "checkpoint.py"), "_get_checkpoint_size"),
}


def _harmless(depth=3):
    frame = sys._getframe(depth)
    for _ in range(8):  # the caller of os.path.exists / open / glob, and those above it
        if frame is None:
            return False
        if (frame.f_code.co_name, True) in {
            (name, frame.f_code.co_filename.endswith(path)) for path, name in HARMLESS
        }:
            return True
        frame = frame.f_back
    return False


def _remote(arg):
    if isinstance(arg, bytes):
        arg = arg.decode(errors="replace")
    return isinstance(arg, (str, os.PathLike)) and os.fspath(arg).startswith("ram:")


def _reject(call, path):
    _guard["calls"].append(f"{call}({path!r})")
    raise LocalCallOnRemotePath(f"local-only call {call}({path!r}) on a ram:// path")


def _audit(
    event,
    args,
    _guard=_guard,
    AUDITED=AUDITED,
    _remote=_remote,
    _reject=_reject,
    _harmless=_harmless,
):
    # (its names bound now: the hook outlives the module's globals at shutdown)
    if _guard["on"] and event in AUDITED:
        for arg in args:
            if _remote(arg) and not _harmless(2):
                _guard["on"] = False  # the error's own formatting may open files
                try:
                    _reject(event, arg)
                finally:
                    _guard["on"] = True


sys.addaudithook(_audit)  # cannot be removed: it acts only while _guard["on"]


@contextlib.contextmanager
def local_calls_fail(monkeypatch):
    """Every local-only file call on a ram:// path raises LocalCallOnRemotePath (and is
    recorded, in case a caller swallows it: the test checks the record too)."""

    def checked(name, function):
        def wrapper(path, *args, **kwargs):
            if _guard["on"] and _remote(path) and not _harmless():
                _reject(name, path)
            return function(path, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(os, "stat", checked("os.stat", os.stat))  # os.path.exists, isdir, ...
    monkeypatch.setattr(os, "lstat", checked("os.lstat", os.lstat))
    h5_open = h5py.File.__init__

    def h5_checked(self, name, *args, **kwargs):  # h5py opens files in C, unaudited
        if _guard["on"] and _remote(name):
            _reject("h5py.File", name)
        return h5_open(self, name, *args, **kwargs)

    monkeypatch.setattr(h5py.File, "__init__", h5_checked)
    _guard["on"], _guard["calls"] = True, []
    try:
        yield _guard["calls"]
    finally:
        _guard["on"] = False


@contextlib.contextmanager
def ram_overwrites_replace(monkeypatch):
    """TensorFlow's ram:// filesystem appends where a file is overwritten (GFile(path,
    "w") and gfile.copy(..., overwrite=True) of an existing file keep its old bytes in
    front); gs:// and local files are replaced. This makes ram:// replace them too (the
    old file removed first), so that the journey sees a real filesystem's semantics:
    a rerun rewrites config.json, a checkpoint rewrites its metadata and weights."""
    gfile = tf.io.gfile
    original_gfile, original_copy = gfile.GFile, gfile.copy

    class GFile(original_gfile):
        def __init__(self, name, mode="r"):
            if "w" in mode and _remote(name) and gfile.exists(name):
                gfile.remove(name)
            super().__init__(name, mode)

    def copy(src, dst, overwrite=False):
        if overwrite and _remote(dst) and gfile.exists(dst):
            gfile.remove(dst)
        return original_copy(src, dst, overwrite)

    # Keras imports the module by its name (importlib), which may give another object.
    keras_gfile = importlib.import_module("tensorflow.io.gfile")
    for module in {id(gfile): gfile, id(keras_gfile): keras_gfile}.values():
        monkeypatch.setattr(module, "GFile", GFile)
        monkeypatch.setattr(module, "copy", copy)
    yield


def test_ram_overwrites_replace_like_gs(monkeypatch):
    with ram_overwrites_replace(monkeypatch):
        for text in ("a longer text", "short"):
            with tf.io.gfile.GFile("ram://o/a.txt", "w") as f:
                f.write(text)
        assert tf.io.gfile.GFile("ram://o/a.txt").read() == "short"
        # Keras' own remote-path saving too: a .keras file (written whole to the path) and
        # a .weights.h5 file (written locally, then copied), each a small model's over a
        # larger one's, end as long as the small model's written afresh.
        large, small = (
            keras.Sequential([keras.Input((8,)), keras.layers.Dense(n)]) for n in (64, 1)
        )
        for name, save in (("m.keras", "save"), ("m.weights.h5", "save_weights")):
            for model, path in ((small, "ram://fresh"), (large, "ram://o"), (small, "ram://o")):
                getattr(model, save)(f"{path}/{name}")
            length = tf.io.gfile.stat(f"ram://o/{name}").length
            assert length == tf.io.gfile.stat(f"ram://fresh/{name}").length, name


def test_the_guard_catches_local_calls_on_ram_paths(monkeypatch):
    with local_calls_fail(monkeypatch) as calls:
        for call in (
            lambda: open("ram://x/a.json"),
            lambda: os.path.exists("ram://x"),
            lambda: os.makedirs("ram://x/y", exist_ok=True),
            lambda: os.listdir("ram://x"),
            lambda: np.load("ram://x/a.npy"),
            lambda: h5py.File("ram://x/a.h5", "w"),
        ):
            with pytest.raises(LocalCallOnRemotePath):
                call()
        tf.io.gfile.makedirs("ram://x")  # TensorFlow's filesystems are not local calls
        with tf.io.gfile.GFile("ram://x/a.json", "w") as f:
            f.write("{}")
        assert tf.io.gfile.exists("ram://x/a.json")
        assert os.path.exists(__file__)  # nor are local paths
    assert len(calls) == 6


def test_make_tfrecords_reads_an_image_folder_and_writes_records_on_ram(monkeypatch):
    from keras_vit_data import records

    images, labels = testing.synthetic_split(12, seed=2, num_classes=2)
    for label in range(2):  # ram:// lists only folders made (gs:// lists every prefix)
        tf.io.gfile.makedirs(f"ram://images/train/class_{label}")
    for i, (image, label) in enumerate(zip(images, labels)):
        png = tf.io.encode_png(image[..., None]).numpy()
        with tf.io.gfile.GFile(f"ram://images/train/class_{label}/{i:02d}.png", "wb") as f:
            f.write(png)
    with ram_overwrites_replace(monkeypatch), local_calls_fail(monkeypatch) as calls:
        _run_tool(
            "keras_vit_tools.make_tfrecords",
            [
                "--source=folder:ram://images",
                "--output_dir=ram://folder_records",
                "--examples_per_shard=4",
                "--noprogress",
            ],
        )
        manifest = records.read_manifest("ram://folder_records")
    assert manifest["class_names"] == ["class_0", "class_1"]
    assert manifest["splits"]["train"]["count"] == 12
    assert calls == []


def _tiny_config(mode="pretrain", **keys):
    from keras_vit_configs import fashion_mnist
    from keras_vit_trainers import train_config

    keys = {"total_steps": 20, "checkpoint_every": 10, **keys}
    config = testing.tiny_config(fashion_mnist.get_config(), every=10, **keys)
    return train_config.resolve(config, mode)


class Killed(Exception):
    """The process dying right after a checkpoint (no final save, no export)."""


def _run_tool(module_name, argv):
    """A tools/ program's `main` in this process with the command line `argv`
    (tests/test_make_tfrecords.py's `run_main`, for any tool). absl's flags are global:
    their values, and whether they were parsed, are restored afterwards. A tool not yet
    imported is imported with the other tools' flags set aside (several define the same
    names: --max_pixels, --run_dir, ...), and removed again with its flags."""
    import importlib

    from absl import flags
    from absl.testing import flagsaver

    FLAGS = flags.FLAGS
    was_parsed, was_imported = FLAGS.is_parsed(), module_name in sys.modules
    with flagsaver.flagsaver():
        aside = []  # (module, flag) of the other tools' flags
        if not was_imported:
            for owner, owned in FLAGS.flags_by_module_dict().items():
                if owner.startswith(("keras_vit_tools.", "keras_vit_deploy.")):
                    aside += [(owner, flag) for flag in owned]
            for name in {flag.name for _, flag in aside}:
                delattr(FLAGS, name)
        before = set(FLAGS)
        try:
            module = importlib.import_module(module_name)
            FLAGS(["prog", *argv])
            module.main(["prog"])
        finally:
            if not was_parsed:
                FLAGS.unparse_flags()
            if not was_imported:
                for name in set(FLAGS) - before:
                    delattr(FLAGS, name)
                sys.modules.pop(module_name, None)
                for owner, flag in aside:
                    if flag.name not in FLAGS:
                        FLAGS[flag.name] = flag
                    FLAGS.register_flag_by_module(owner, flag)


def test_records_pretrain_kill_resume_evaluate_export_on_ram(monkeypatch, caplog):
    from keras_vit_deploy import datasets, serving
    from keras_vit_trainers import checkpointing, train_lib

    strategy = tf.distribute.get_strategy()
    with ram_overwrites_replace(monkeypatch), local_calls_fail(monkeypatch) as calls:
        manifest = testing.make_tiny_data(DATA, n_train=64, n_test=32, per_shard=32)
        assert manifest["num_classes"] == 4 and tf.io.gfile.glob(f"{DATA}/train*")

        # The first run dies right after its step-10 checkpoint is written.
        save = checkpointing.RunCheckpoints.save

        def die_after_first_checkpoint(self, step):
            save(self, step)
            self.sync()
            raise Killed(f"killed after step {step}")

        with monkeypatch.context() as m:
            m.setattr(checkpointing.RunCheckpoints, "save", die_after_first_checkpoint)
            with pytest.raises(Killed, match="after step 10"):
                train_lib.run(_tiny_config(), data_dir=DATA, model_dir=RUN, strategy=strategy)
        run = RunDirectory(RUN)
        assert checkpointing.saved_steps(run.checkpoints()) == [10]
        assert not tf.io.gfile.exists(run.metrics) and not tf.io.gfile.exists(run.weights)

        # The rerun resumes from that checkpoint, trains the rest, evaluates, exports.
        with caplog.at_level(logging.INFO, logger="trainers"):
            metrics = train_lib.run(_tiny_config(), data_dir=DATA, model_dir=RUN, strategy=strategy)
        assert "resumed from step 10" in caplog.text
        assert metrics["resumed_from_step"] == 10 and metrics["step"] == 20
        assert 0.0 <= metrics["test_accuracy"] <= 1.0
        assert [r["step"] for r in run.read_jsonl(run.train_log)][-1] == 20
        assert {r["step"] for r in run.read_jsonl(run.eval_log)} >= {20}
        assert run.read_json(run.metrics)["step"] == 20
        assert tf.io.gfile.exists(run.learning_curve)
        assert tf.io.gfile.listdir(run.tensorboard("train"))
        model = run.read_model()  # model_config.json + model.weights.h5, read back

        # Fine-tuning starts from the run (--init=ram://run): its model, its weights.
        finetune = _tiny_config(mode="finetune")
        tuned = train_lib.model_factory(finetune, init=RUN)(num_classes=4)
        train_lib.load_init(tuned, RUN)
        for got, want in zip(tuned.get_weights(), model.get_weights()):
            np.testing.assert_array_equal(got, want)

        # Export: a SavedModel, then a TFLite file from it with its report, evaluated
        # on the test records in ram://data.
        saved_model = f"{EXPORT}/saved_model"
        _run_tool(
            "keras_vit_tools.export_savedmodel", [f"--run_dir={RUN}", f"--output={saved_model}"]
        )
        assert serving.read_metadata(saved_model)
        served = serving.loaded_signatures(tf.saved_model.load(saved_model))
        assert served.image_size == (28, 28)
        tflite_file, report = f"{EXPORT}/model.tflite", f"{EXPORT}/reports/tflite.json"
        _run_tool(
            "keras_vit_tools.export_tflite",
            [
                f"--saved_model={saved_model}",
                f"--output={tflite_file}",
                f"--report={report}",
                f"--eval_data={DATA}/test*",
                "--num_eval_images=32",
                "--latency_repeats=1",
            ],
        )
        assert tf.io.gfile.stat(tflite_file).length > 0
        with tf.io.gfile.GFile(report) as f:
            assert json.load(f)["tflite_file"] == tflite_file
        pixels, labels = datasets.tfrecord_images(f"{DATA}/test*", (28, 28), 32)
        assert len(pixels) == len(labels) == 32
        assert model.predict(pixels.astype("float32"), verbose=0).shape == (32, 4)
    assert calls == []  # none swallowed either
