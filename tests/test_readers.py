"""data/readers.py: a dataset opened by kind (ours, TFDS by name, ImageNet-layout shards),
each split's records and their labels, read through the same `records.Split`."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
import trainer_testing as testing
from dataset_testing import (
    TFDS_CLASSES,
    TFDS_NAME,
    TFDS_SPLITS,
    prepare_tfds,
    synthetic_split,
    write_imagenet_shards,
)

from keras_vit_data import readers, records, tfds_reader
from keras_vit_data.records import DataError


def _labels(reader, split):
    """The 0-based labels of `split`'s records, in order, as the reader parses them."""
    info = reader.split(split)
    ds = records.read_records(info).map(lambda r: reader.parse(r)[1][0])
    return np.array(list(ds.as_numpy_iterator()))


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("tfds")
    prepare_tfds(data_dir, num_shards=3)
    return str(data_dir)


def test_tfds_by_name_reads_the_prepared_files_with_its_classes_and_slices(tfds_dir):
    reader = readers.open_reader(None, f"tfds:{TFDS_NAME}", tfds_data_dir=tfds_dir)
    assert reader.num_classes == 4 and reader.class_names == tuple(TFDS_CLASSES)
    assert (reader.image_key, reader.label_key, reader.multi_label) == ("image", "label", False)
    train = reader.split("train")
    assert train.num_examples == TFDS_SPLITS["train"][0] and len(train.files) == 3
    # TFDS shuffles at preparation: the records hold every generated label once.
    expected = np.sort(synthetic_split(*TFDS_SPLITS["train"])[1])
    labels = _labels(reader, "train")
    np.testing.assert_array_equal(np.sort(labels), expected)
    # Slices read the records TFDS's own reader reads, in the same order.
    head, tail = reader.split("train[:75%]"), reader.split("train[75%:]")
    assert head.num_examples + tail.num_examples == train.num_examples
    assert any(tail.file_starts())  # the slice starts inside a file
    ours = np.concatenate([_labels(reader, "train[:75%]"), _labels(reader, "train[75%:]")])
    np.testing.assert_array_equal(ours, labels)
    theirs = tfds.builder(TFDS_NAME, data_dir=tfds_dir).as_dataset(
        split="train[75%:]", shuffle_files=False
    )
    np.testing.assert_array_equal(
        _labels(reader, "train[75%:]"), [int(x["label"]) for x in theirs.as_numpy_iterator()]
    )
    assert reader.has_split("train[:99%]") and not reader.has_split("validation")
    with pytest.raises(DataError, match="no split 'validation'.*train"):
        reader.split("validation")


def test_tfds_images_stay_encoded_and_decode_to_the_generated_pixels(tfds_dir):
    reader = readers.open_reader(None, f"tfds:{TFDS_NAME}", tfds_data_dir=tfds_dir)
    record = next(iter(records.read_records(reader.split("test"))))
    encoded, label = reader.parse(record)
    assert encoded.numpy()[:4] == b"\x89PNG"
    image = tf.io.decode_png(encoded).numpy()
    images, labels = synthetic_split(*TFDS_SPLITS["test"])
    matches = [i for i in range(len(images)) if np.array_equal(images[i], image[..., 0])]
    assert matches and labels[matches[0]] == int(label[0])


def test_a_tfds_name_that_is_not_prepared_or_not_a_classifier_is_one_clear_error(
    tmp_path, tfds_dir
):
    with pytest.raises(DataError, match="tfds:no_such_dataset_xyz"):
        readers.open_reader(None, "tfds:no_such_dataset_xyz", tfds_data_dir=str(tmp_path))
    with pytest.raises(DataError, match="not prepared.*tfds build mnist"):
        readers.open_reader(None, "tfds:mnist", tfds_data_dir=str(tmp_path))


def test_named_builders_features_give_the_image_and_label_keys():
    """imagenet2012's features as TFDS declares them (no data needed), and a dataset
    without a label."""
    info = tfds.builder("imagenet2012", data_dir="/nonexistent").info
    assert tfds_reader.feature_keys("imagenet2012", info.features, info.supervised_keys) == (
        "image",
        "label",
    )
    assert info.features["label"].num_classes == 1000
    features = tfds.features.FeaturesDict({"image": tfds.features.Image(shape=(8, 8, 3))})
    with pytest.raises(DataError, match="needs one Image feature and a ClassLabel"):
        tfds_reader.feature_keys("x", features)


@pytest.fixture(scope="module")
def imagenet_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("imagenet"))
    labels = {
        "train": write_imagenet_shards(data_dir, "train", 40, 4, seed=0),
        "validation": write_imagenet_shards(data_dir, "validation", 12, 2, seed=1),
    }
    return data_dir, labels


def test_imagenet_layout_shards_are_read_as_they_are_with_the_label_offset(imagenet_dir):
    data_dir, labels = imagenet_dir
    reader = readers.open_reader(data_dir, readers.IMAGENET_RECORDS, num_classes=4, label_offset=1)
    assert reader.split_names == ("train", "validation") and reader.class_names is None
    train = reader.split("train")
    assert train.counts == [10, 10, 10, 10] and train.num_examples == 40
    np.testing.assert_array_equal(_labels(reader, "train"), labels["train"])
    np.testing.assert_array_equal(_labels(reader, "validation"), labels["validation"])
    batch = next(iter(records.read_records(train).batch(40).map(reader.parse_labels)))
    np.testing.assert_array_equal(batch.values.numpy(), labels["train"])


def test_imagenet_layout_is_never_guessed(imagenet_dir, tmp_path):
    data_dir, _ = imagenet_dir
    with pytest.raises(DataError, match="ImageNet layout.*dataset=imagenet_records"):
        readers.open_reader(data_dir)  # no manifest, no name: the flags that read it
    with pytest.raises(DataError, match="needs --config.input.label_offset"):
        readers.open_reader(data_dir, readers.IMAGENET_RECORDS, num_classes=4)
    with pytest.raises(DataError, match="needs --config.num_classes"):
        readers.open_reader(data_dir, readers.IMAGENET_RECORDS, label_offset=1)
    # A wrong offset shows as a label out of range, naming the shard and the key.
    reader = readers.open_reader(data_dir, readers.IMAGENET_RECORDS, num_classes=4, label_offset=-1)
    with pytest.raises(DataError, match=r"train-00000-of-00004: record 0 has image/class/label"):
        reader.split("train")
    # Shards of another layout: the missing key is named.
    other = tmp_path / "other"
    other.mkdir()
    with tf.io.TFRecordWriter(str(other / "train-00000-of-00001")) as writer:
        writer.write(
            records.serialize_example(b"png", 1).replace(b"image/encoded", b"image/bytes__")
        )
    reader = readers.open_reader(
        str(other), readers.IMAGENET_RECORDS, num_classes=4, label_offset=1
    )
    with pytest.raises(DataError, match="no bytes_list feature 'image/encoded'"):
        reader.split("train")


def test_record_counts_come_from_the_headers_and_a_cut_file_is_named(tmp_path):
    path = str(tmp_path / "x.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for i in range(7):
            writer.write(b"x" * (i * 13))
    assert readers.count_records(path) == 7
    with open(path, "rb") as f:
        data = f.read()
    with open(path, "wb") as f:
        f.write(data[:-3])
    with pytest.raises(DataError, match="x.tfrecord: the last record is cut short"):
        readers.count_records(path)


def test_our_data_directory_is_the_default_and_refuses_a_label_offset(tmp_path):
    data = str(tmp_path / "data")
    testing.make_tiny_data(data)
    reader = readers.open_reader(data)
    assert reader.num_classes == 4 and reader.class_names == tuple(f"class_{i}" for i in range(4))
    assert reader.split("train").num_examples == 128 and reader.has_split("test")
    with pytest.raises(DataError, match="label_offset=1 applies to"):
        readers.open_reader(data, label_offset=1)
    with pytest.raises(DataError, match="expected tfds:NAME"):
        readers.open_reader(data, "imagenet")
    # A config that names a TFDS dataset, given a make_tfrecords --data_dir: says which.
    with pytest.raises(DataError, match="is a make_tfrecords directory.*dataset= \\(empty\\)"):
        readers.open_reader(data, "tfds:cifar10")
