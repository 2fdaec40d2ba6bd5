"""data/records.py, the one owner of the record format: examples written and parsed,
the manifest written whole and read with errors naming the folder, the records of a
split and of its first N examples; and no other module spells the feature keys."""

import ast
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from keras_vit_data import records
from keras_vit_deploy import datasets

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_an_example_round_trips_through_the_parsers():
    single = records.serialize_example(b"\x89PNG bytes", 3)
    multi = records.serialize_example(b"jpeg", [0, 2])
    unlabelled = records.serialize_example(b"gif", [])
    encoded, labels = records.parse_example(tf.constant(multi))
    assert encoded.numpy() == b"jpeg" and labels.numpy().tolist() == [0, 2]
    encoded, labels = records.parse_examples(tf.constant([single, multi, unlabelled]))
    assert encoded.numpy().tolist() == [b"\x89PNG bytes", b"jpeg", b"gif"]
    np.testing.assert_array_equal(labels, [[3, -1], [0, 2], [-1, -1]])
    sparse = records.parse_labels(tf.constant([single, multi]))
    np.testing.assert_array_equal(tf.sparse.to_dense(sparse, -1), [[3, -1], [0, 2]])
    # The labels alone parse without the image feature; the examples do not.
    labels_only = tf.train.Example(
        features=tf.train.Features(
            feature={records.LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))}
        )
    ).SerializeToString()
    assert records.parse_labels(tf.constant([labels_only])).values.numpy().tolist() == [1]
    with pytest.raises(tf.errors.InvalidArgumentError, match=records.ENCODED_KEY):
        records.parse_examples(tf.constant([labels_only]))


def _write_split(directory, counts, split="train"):
    shards = []
    for i, count in enumerate(counts):
        name = records.shard_name(split, i, len(counts))
        with tf.io.TFRecordWriter(os.path.join(directory, name)) as writer:
            for j in range(count):
                writer.write(records.serialize_example(b"x", [10 * i + j]))
        shards.append({"file": name, "count": count})
    manifest = {"num_classes": 2, "splits": {split: {"count": sum(counts), "shards": shards}}}
    records.write_manifest(directory, manifest)
    return manifest


def test_the_manifest_is_written_whole_and_read_back(tmp_path):
    manifest = _write_split(str(tmp_path), [3, 2])
    assert records.read_manifest(str(tmp_path)) == manifest
    assert sorted(os.listdir(tmp_path)) == [
        "manifest.json",
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]  # no temporary file left
    manifest["num_classes"] = 5
    records.write_manifest(str(tmp_path), manifest)  # replaces the old one
    assert records.read_manifest(str(tmp_path))["num_classes"] == 5
    records.remove_manifest(str(tmp_path))
    with pytest.raises(records.DataError, match=f"--data_dir={tmp_path}: no manifest.json\\."):
        records.read_manifest(str(tmp_path))
    (tmp_path / records.MANIFEST).write_text('{"splits": ')
    with pytest.raises(records.DataError, match=f"{tmp_path}/manifest.json: not valid JSON"):
        records.read_manifest(str(tmp_path))


def test_the_records_of_a_split_and_of_its_first_examples(tmp_path):
    _write_split(str(tmp_path), [3, 2, 4])
    info = records.split_records(str(tmp_path), "train")
    assert info.counts == [3, 2, 4] and info.num_examples == 9

    def labels(split):
        return [int(records.parse_example(r)[1][0]) for r in records.read_records(split)]

    first = records.first_examples(info, 4)  # all of shard 0, one of shard 1, no shard 2
    assert first.counts == [3, 1] and first.num_examples == 4 and len(first.files) == 2
    assert labels(first) == [0, 1, 2, 10]
    assert labels(info) == [0, 1, 2, 10, 11, 20, 21, 22, 23]
    assert records.first_examples(info, 0) is info and records.first_examples(info, 50) is info
    assert info.counts == [3, 2, 4]  # untouched


def test_split_errors_name_the_folder_and_the_problem(tmp_path):
    data = str(tmp_path)
    _write_split(data, [2, 0], split="train")
    with pytest.raises(records.DataError, match=f"--data_dir={data}: no split 'test' .*has train"):
        records.split_records(data, "test")
    manifest = records.read_manifest(data)
    manifest["splits"]["train"]["shards"][1]["count"] = 0
    manifest["splits"]["empty"] = {
        "count": 0,
        "shards": [{"file": "train-00001-of-00002.tfrecord", "count": 0}],
    }
    manifest["splits"]["lost"] = {"count": 1, "shards": [{"file": "gone.tfrecord", "count": 1}]}
    records.write_manifest(data, manifest)
    with pytest.raises(records.DataError, match="split 'empty' is empty"):
        records.split_records(data, "empty")
    with pytest.raises(records.DataError, match="missing: .*gone.tfrecord"):
        records.split_records(data, "lost")


def test_data_error_has_one_class():
    assert datasets.DataError is records.DataError


def _literals(tree):
    """The string constants of a module that are not docstrings."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if id(node) not in docstrings:
                yield node.value


def test_only_the_record_format_spells_the_feature_keys():
    """data/records.py owns the keys; tests/dataset_testing.py writes another project's
    layout (ImageNet's), which happens to use the same names, in its own words."""
    spelled, keys = set(), (records.ENCODED_KEY, records.LABEL_KEY)
    packages = (
        "keras_vit",
        "cli",
        "data",
        "deploy",
        "tools",
        "trainers",
        "configs",
        "benchmarks",
        ".ci",
    )
    for folder, _, files in (w for p in packages for w in os.walk(os.path.join(ROOT, p))):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if not any(key in text for key in keys):
                    continue
                if any(key in value for value in _literals(ast.parse(text, path)) for key in keys):
                    spelled.add(os.path.relpath(path, ROOT))
    assert spelled == {os.path.join("data", "records.py")}


def test_the_manifest_lists_the_features_as_written(tmp_path):
    import trainer_testing as testing

    manifest = testing.make_tiny_data(str(tmp_path), n_train=2, n_test=2, num_classes=2)
    on_disk = json.loads((tmp_path / records.MANIFEST).read_text())
    assert on_disk == manifest
    assert set(on_disk["features"]) == {records.ENCODED_KEY, records.LABEL_KEY}
    assert [s["file"] for s in on_disk["splits"]["train"]["shards"]] == [
        records.shard_name("train", 0, 1)
    ]
