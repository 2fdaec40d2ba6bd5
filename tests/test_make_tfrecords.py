"""tools/make_tfrecords.py: Fashion-MNIST IDX, image folders; deterministic, manifest."""

import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing
import warm_programs
from absl import flags
from absl.testing import flagsaver

from keras_vit_data import fashion_mnist, records, sources, writer
from keras_vit_data.records import DataError
from keras_vit_tools import make_tfrecords
from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers.input_spec import InputSpec

FMNIST = fashion_mnist.FASHION_MNIST_DIR


def run_main(*args):
    """tools/make_tfrecords.py's `main` in this process under the command-line flags
    `args`: what the command does after start-up, without a TensorFlow start-up per
    case (`test_undecodable_image_is_skipped_counted_and_named` runs the real
    command). absl's flags are global: their values, and whether they were parsed,
    are restored afterwards."""
    was_parsed = flags.FLAGS.is_parsed()
    with flagsaver.flagsaver():
        flags.FLAGS(["make_tfrecords.py", *args])
        try:
            make_tfrecords.main([])
        finally:
            if not was_parsed:
                flags.FLAGS.unparse_flags()


def _digest(d):
    return {
        f: hashlib.sha256(open(os.path.join(d, f), "rb").read()).hexdigest()
        for f in sorted(os.listdir(d))
    }


@pytest.mark.skipif(
    not os.path.exists(f"{FMNIST}/t10k-labels-idx1-ubyte.gz"),
    reason="Fashion-MNIST IDX files not installed (make data)",
)
def test_fashion_mnist_flags(tmp_path, capsys):
    out = tmp_path / "fm"
    run_main(
        "--source=fashion_mnist",
        f"--output_dir={out}",
        "--max_examples=50",
        "--examples_per_shard=20",
    )
    assert f"Wrote {out} (train: 50, test: 50; 10 classes)" in capsys.readouterr().out
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["num_classes"] == 10 and manifest["class_names"][9] == "Ankle boot"
    assert manifest["splits"]["train"]["count"] == 50
    assert [s["count"] for s in manifest["splits"]["train"]["shards"]] == [17, 17, 16]
    labels = fashion_mnist.read_idx(f"{FMNIST}/train-labels-idx1-ubyte.gz")[:50]
    images = fashion_mnist.read_idx(f"{FMNIST}/train-images-idx3-ubyte.gz")[:50]
    ds = ip.eval_dataset(
        str(out), InputSpec(image_size=28, num_classes=10), split="train", batch_size=50
    )
    x, y, _ = next(iter(ds))
    np.testing.assert_array_equal(y.numpy(), labels)
    np.testing.assert_allclose(x.numpy()[..., 0], images / 127.5 - 1.0, atol=1e-6)
    np.testing.assert_array_equal(x.numpy()[..., 0], x.numpy()[..., 2])  # gray -> 3 channels


def test_folder_source_is_deterministic(tmp_path):
    root = tmp_path / "images"
    for split in ("train", "test"):
        for c, cls in enumerate(("cat", "dog")):
            (root / split / cls).mkdir(parents=True)
            for i in range(3):
                img = np.full((5, 7, 3), 40 * i + c, np.uint8)
                (root / split / cls / f"{i}.png").write_bytes(tf.io.encode_png(img).numpy())
    (root / "train" / "cat" / "notes.txt").write_text("not an image")
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        m = writer.make_tfrecords(f"folder:{root}", str(out), examples_per_shard=4, progress=False)
    assert _digest(a) == _digest(b)
    assert m["class_names"] == ["cat", "dog"] and m["splits"]["train"]["count"] == 6
    assert len(m["splits"]["train"]["shards"]) == 2
    record = next(iter(tf.data.TFRecordDataset(str(a / m["splits"]["train"]["shards"][0]["file"]))))
    ex = tf.train.Example.FromString(record.numpy())
    assert ex.features.feature["image/class/label"].int64_list.value == [0]
    assert ex.features.feature["image/encoded"].bytes_list.value[0][:4] == b"\x89PNG"


def test_multi_label_examples_round_trip(tmp_path):
    images = np.zeros((3, 8, 8), np.uint8)
    labels = [[0, 2], [1], [0, 1, 2]]
    writer.make_tfrecords(
        ({"train": (3, zip(images, labels))}, ["a", "b", "c"], True), str(tmp_path), progress=False
    )
    spec = InputSpec(image_size=8, num_classes=3, multi_label=True)
    ds = ip.eval_dataset(str(tmp_path), spec, split="train", batch_size=3)
    _, y, _ = next(iter(ds))
    np.testing.assert_array_equal(y.numpy(), [[1, 0, 1], [0, 1, 0], [1, 1, 1]])


def test_unknown_source_and_missing_files(tmp_path):
    with pytest.raises(ValueError, match="--source"):
        sources.get_source("bogus")
    with pytest.raises(DataError, match="dataset-fashion-mnist"):
        sources.get_source("fashion_mnist", fashion_mnist_dir=str(tmp_path))


def _two_class_tree(root, junk=()):
    for c, cls in enumerate(("cat", "dog")):
        (root / cls).mkdir(parents=True)
        for i in range(2):
            img = np.full((4, 4, 3), 30 * i + c, np.uint8)
            (root / cls / f"{i}.png").write_bytes(tf.io.encode_png(img).numpy())
    for name in junk:
        (root / name).write_bytes(b"junk\n")


def test_undecodable_image_is_skipped_counted_and_named(tmp_path):
    root = tmp_path / "images"
    _two_class_tree(root, junk=["cat/x.jpg"])
    jpeg = tf.io.encode_jpeg(np.full((16, 16, 3), 90, np.uint8)).numpy()
    (root / "dog" / "cut.jpg").write_bytes(jpeg[: len(jpeg) // 2])
    r = warm_programs.run(
        [
            sys.executable,
            "tools/make_tfrecords.py",
            f"--source=folder:{root}",
            f"--output_dir={tmp_path / 'out'}",
            "--noprogress",
        ],
        cwd=testing.ROOT,
        capture_output=True,
        text=True,
        env=testing.env(),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"skipping {root / 'cat' / 'x.jpg'}: not a JPEG, PNG, GIF or BMP image (5 bytes)" in (
        r.stderr
    )
    assert "train: 4 (2 skipped: 1 not an image, 1 truncated)" in r.stdout
    assert "Premature end" not in r.stderr  # libjpeg's line: the cut JPEG is never decoded
    split = json.loads((tmp_path / "out" / "manifest.json").read_text())["splits"]["train"]
    assert split["count"] == 4 and split["skipped"] == 2
    assert split["skipped_by_reason"] == {"not_an_image": 1, "truncated": 1}
    assert sorted(split["skipped_examples"]) == [
        str(root / "cat" / "x.jpg"),
        str(root / "dog" / "cut.jpg"),
    ]
    spec = InputSpec(image_size=4, num_classes=2)
    ds = ip.eval_dataset(str(tmp_path / "out"), spec, split="train", batch_size=8)
    _, labels, weights = next(iter(ds))  # padded to the batch with weight 0
    assert sorted(labels.numpy()[weights.numpy() > 0].tolist()) == [0, 0, 1, 1]


def test_strict_makes_an_undecodable_image_fatal(tmp_path, capsys):
    root = tmp_path / "images"
    _two_class_tree(root, junk=["dog/bad.png"])
    with pytest.raises(SystemExit) as exit_info:
        run_main(
            f"--source=folder:{root}",
            f"--output_dir={tmp_path / 'out'}",
            "--strict",
            "--noprogress",
        )
    assert exit_info.value.code == 2
    assert f"error: {root / 'dog' / 'bad.png'}: not a JPEG, PNG, GIF or BMP image" in (
        capsys.readouterr().err
    )


def test_one_class_folder_is_an_error(tmp_path):
    root = tmp_path / "images"
    (root / "cat").mkdir(parents=True)
    (root / "cat" / "0.png").write_bytes(tf.io.encode_png(np.zeros((4, 4, 3), np.uint8)).numpy())
    with pytest.raises(
        ValueError,
        match=r"1 class folder\(s\) \['cat'\]; a classifier needs "
        r"at least two",
    ):
        sources.folder_source(str(root))


def test_an_interrupted_rewrite_leaves_no_manifest_to_trust(tmp_path):
    out = str(tmp_path / "out")
    image = np.zeros((4, 4, 3), np.uint8)
    source = ({"train": (2, [(image, [0]), (image, [1])])}, ["a", "b"], False)
    writer.make_tfrecords(source, out, progress=False)
    assert ip.read_manifest(out)["splits"]["train"]

    def broken():
        yield image, [0]
        raise OSError("disk went away")

    with pytest.raises(OSError, match="disk went away"):
        writer.make_tfrecords(({"train": (2, broken())}, ["a", "b"], False), out, progress=False)
    with pytest.raises(ip.DataError, match="no manifest.json"):
        ip.read_manifest(out)


def test_a_truncated_manifest_is_named(tmp_path):
    (tmp_path / "manifest.json").write_text('{"splits": {"train"')
    with pytest.raises(
        ip.DataError, match=r"manifest.json: not valid JSON .* tools/make_tfrecords.py"
    ):
        ip.read_manifest(str(tmp_path))


def test_a_tfds_dataset_without_image_and_label_is_named(monkeypatch):
    import types

    import tensorflow_datasets as tfds

    features = {"image": tfds.features.Image(), "caption": tfds.features.Text()}
    builder = types.SimpleNamespace(
        download_and_prepare=lambda: None, info=types.SimpleNamespace(features=features)
    )
    monkeypatch.setattr(tfds, "builder", lambda name, data_dir=None: builder)
    with pytest.raises(ip.DataError, match=r"tfds:coco_captions: .* \['caption', 'image'\]"):
        sources.tfds_source("coco_captions", None)


# Runs in a fresh interpreter: a writer of arrays to a local folder, then whether
# TensorFlow was imported on the way.
_WITHOUT_TF = """
import runpy, sys
sys.argv = sys.argv[1:]
if sys.argv[0].endswith(".py"):  # the command, as a user runs it
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    except SystemExit as e:
        assert not e.code, e.code
else:  # a numpy source: arrays of 1 to 4 channels
    import numpy as np
    from keras_vit_data import writer
    rng = np.random.default_rng(0)
    images = [rng.integers(0, 256, (5 + i % 3, 4 + i % 5, 1 + i % 4), np.uint8) for i in range(30)]
    np.save(sys.argv[1] + ".npy", np.array(images, dtype=object), allow_pickle=True)
    source = ({"train": (30, zip(images, range(30)))}, list("abc"), False)
    writer.make_tfrecords(source, sys.argv[1], examples_per_shard=8, progress=False)
print("tensorflow imported:", "tensorflow" in sys.modules)
"""


def _read_back(data_dir, split):
    """(images, labels) of a split through the trainers' record reader."""
    info = records.split_records(data_dir, split)
    parsed = [records.parse_example(r) for r in records.read_records(info)]
    return (
        [tf.io.decode_png(image, channels=0).numpy() for image, _ in parsed],
        [labels.numpy().tolist() for _, labels in parsed],
    )


@pytest.mark.skipif(not fashion_mnist.available(), reason="Fashion-MNIST IDX files not installed")
def test_fashion_mnist_is_written_without_tensorflow(tmp_path):
    out = tmp_path / "fm"
    command = [
        "tools/make_tfrecords.py",
        "--source=fashion_mnist",
        f"--output_dir={out}",
        "--max_examples=300",
        "--examples_per_shard=128",
        "--noprogress",
    ]
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TF, *command],
        capture_output=True,
        text=True,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )
    assert run.returncode == 0, run.stderr
    assert "tensorflow imported: False" in run.stdout
    assert f"Wrote {out} (train: 300, test: 300; 10 classes)" in run.stdout
    for split in ("train", "test"):
        images, labels = fashion_mnist.read_split(FMNIST, split)
        got, got_labels = _read_back(str(out), split)
        np.testing.assert_array_equal(np.stack(got)[..., 0], images[:300])
        assert got_labels == [[int(label)] for label in labels[:300]]


def test_arrays_are_written_without_tensorflow(tmp_path):
    out = str(tmp_path / "arrays")
    run = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TF, "-", out], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    assert "tensorflow imported: False" in run.stdout
    images = np.load(out + ".npy", allow_pickle=True)
    got, labels = _read_back(out, "train")
    assert labels == [[i] for i in range(30)]
    for image, array in zip(got, images):
        np.testing.assert_array_equal(image, array)
