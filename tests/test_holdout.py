"""Your folder, with a validation split: make_tfrecords' folder source names val/ and
eval/ `validation`, shuffles the write order with a seed, and `--holdout` writes a
stratified, deterministic `validation` split recorded in the manifest (data/holdout.py)."""

import collections
import logging

import numpy as np
import pytest
import tensorflow as tf

from keras_vit_data import holdout, records, sources, writer

PNG = tf.io.encode_png(np.zeros((4, 4, 1), np.uint8)).numpy()


def _tree(root, counts, split=None):
    """ROOT/[split/]<class>/<i>.png with counts {class: n}."""
    base = root / split if split else root
    for name, n in counts.items():
        (base / name).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            (base / name / f"{i:03d}.png").write_bytes(PNG)


def _labels(out, split):
    info = records.read_manifest(str(out))["splits"][split]
    labels = []
    for shard in info["shards"]:
        for record in tf.data.TFRecordDataset(str(out / shard["file"])):
            labels.append(int(records.parse_example(record)[1][0]))
    return labels


def test_split_is_stratified_deterministic_and_per_class():
    labels = np.repeat([0, 1, 2], [50, 20, 3])
    train, validation = holdout.split(labels, 3, 0.1, seed=7)
    assert sorted(train + validation) == list(range(len(labels)))
    assert collections.Counter(labels[validation]) == {0: 5, 1: 2, 2: 1}  # round, at least 1
    assert (train, validation) == holdout.split(labels, 3, 0.1, seed=7)
    assert validation != holdout.split(labels, 3, 0.1, seed=8)[1]
    # Adding images to class 0 leaves the other classes' split as it was.
    more = np.concatenate([labels, np.zeros(30, np.int64)])
    _, validation_more = holdout.split(more, 3, 0.1, seed=7)
    assert [i for i in validation_more if more[i] != 0] == [i for i in validation if labels[i] != 0]
    # One image: kept for training; two: one each side.
    assert holdout.split([0, 1, 1], 2, 0.5)[1] == [holdout.split([0, 1, 1], 2, 0.5)[1][0]]
    assert holdout.split([0, 1, 1], 2, 0.5)[1][0] in (1, 2)


@pytest.mark.parametrize("fraction", [0, 1, -0.1, 1.5, "x"])
def test_a_bad_fraction_names_the_flag(fraction):
    with pytest.raises(ValueError, match=f"--holdout={fraction}: expected a fraction"):
        holdout.check_fraction(fraction)


def test_flat_folder_with_holdout_writes_a_recorded_validation_split(tmp_path, caplog):
    _tree(tmp_path / "images", {"cat": 30, "dog": 10, "emu": 2})
    out = tmp_path / "out"
    with caplog.at_level(logging.WARNING, logger="tools"):
        manifest = writer.make_tfrecords(
            f"folder:{tmp_path / 'images'}", str(out), progress=False, holdout=0.2, seed=3
        )
    assert manifest["splits"]["train"]["count"] == 33
    assert manifest["splits"]["validation"]["count"] == 9
    recorded = records.read_manifest(str(out))["holdout"]
    assert recorded == {
        "from": "train",
        "fraction": 0.2,
        "seed": 3,
        "class_names": ["cat", "dog", "emu"],
        "train_per_class": [24, 8, 1],
        "validation_per_class": [6, 2, 1],
    }
    assert collections.Counter(_labels(out, "validation")) == {0: 6, 1: 2, 2: 1}
    # Imbalance (30 against 2) and the classes with few validation images: one line each.
    messages = [r.getMessage() for r in caplog.records]
    assert sum("imbalanced classes: 'cat' has 30 images, 'emu' 2" in m for m in messages) == 1
    assert sum("fewer than 5 validation images: dog (2), emu (1)" in m for m in messages) == 1
    # The same command writes the same records.
    again = tmp_path / "again"
    writer.make_tfrecords(
        f"folder:{tmp_path / 'images'}", str(again), progress=False, holdout=0.2, seed=3
    )
    for split in ("train", "validation"):
        assert _labels(again, split) == _labels(out, split)


def test_folder_order_is_shuffled_not_sorted_by_class(tmp_path):
    _tree(tmp_path / "images", {"a": 20, "b": 20})
    out = tmp_path / "out"
    manifest = writer.make_tfrecords(f"folder:{tmp_path / 'images'}", str(out), progress=False)
    labels = _labels(out, "train")
    assert sorted(labels) == [0] * 20 + [1] * 20
    assert labels != sorted(labels)  # sorted by class would put every 0 first
    assert manifest["order"] == {"shuffled": True, "seed": 0}


@pytest.mark.parametrize("name", ["val", "validation", "eval"])
def test_a_held_out_folder_is_the_validation_split(tmp_path, name):
    _tree(tmp_path / "images", {"a": 3, "b": 3}, "train")
    _tree(tmp_path / "images", {"a": 1, "b": 2}, name)
    manifest = writer.make_tfrecords(
        f"folder:{tmp_path / 'images'}", str(tmp_path / "out"), progress=False
    )
    assert {k: v["count"] for k, v in manifest["splits"].items()} == {
        "train": 6,
        "validation": 3,
    }
    with pytest.raises(ValueError, match=f"{name}.* is already a validation split"):
        sources.folder_source(str(tmp_path / "images"), holdout=0.1)


def test_two_validation_folders_and_holdout_elsewhere_are_errors(tmp_path):
    _tree(tmp_path / "images", {"a": 1, "b": 1}, "val")
    _tree(tmp_path / "images", {"a": 1, "b": 1}, "eval")
    with pytest.raises(ValueError, match=r"both eval/ and val/ would be the 'validation' split"):
        sources.folder_source(str(tmp_path / "images"))
    with pytest.raises(ValueError, match="--holdout applies to --source=folder:PATH"):
        sources.get_source("tfds:mnist", holdout=0.1)


def _idx(path, array):
    """An IDX file as Fashion-MNIST's: magic 0x08 (unsigned bytes) + ndim, big-endian
    sizes, the bytes; gzipped."""
    import gzip
    import struct

    header = struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def test_fashion_mnist_holdout_is_a_stratified_validation_split(tmp_path):
    labels = np.repeat(np.arange(10), 4)[np.random.default_rng(0).permutation(40)]
    images = np.arange(40, dtype=np.uint8)[:, None, None] * np.ones((1, 28, 28), np.uint8)
    _idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    _idx(tmp_path / "train-labels-idx1-ubyte.gz", labels)
    _idx(tmp_path / "t10k-images-idx3-ubyte.gz", images[:10])
    _idx(tmp_path / "t10k-labels-idx1-ubyte.gz", labels[:10])
    splits, names, _, extra = sources.get_source(
        "fashion_mnist", fashion_mnist_dir=str(tmp_path), holdout=0.25, seed=3
    )
    assert {k: v[0] for k, v in splits.items()} == {"train": 30, "validation": 10, "test": 10}
    seen = {}
    for split in ("train", "validation"):
        rows = list(splits[split][1])
        seen[split] = {int(tf.io.decode_png(png)[0, 0, 0]) for png, _ in rows}
        counts = collections.Counter(int(label) for _, label in rows)
        assert counts == {c: 3 if split == "train" else 1 for c in range(10)}
    assert seen["train"].isdisjoint(seen["validation"])  # no image in both
    assert seen["train"] | seen["validation"] == set(range(40))  # nothing lost
    assert extra["holdout"]["seed"] == 3 and len(names) == 10
