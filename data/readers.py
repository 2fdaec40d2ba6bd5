"""What a trainer reads: a dataset, opened once (`open_reader`) as a `Reader` that says
what its examples are and lists the records of any split.

Three kinds of dataset, each named, never guessed:

- a data directory of ours (tools/make_tfrecords.py): `--data_dir=DATA` with
  DATA/manifest.json (`records`);
- a TensorFlow Datasets dataset by name: `config.input.dataset="tfds:NAME"` (as TFDS
  names it: `name[/config][:version]`),
  prepared in `config.input.tfds_data_dir` (`tfds_reader`), with TFDS's slicing syntax
  for splits (`train[:99%]`);
- ImageNet-layout shards as TensorFlow's models write them (`build_imagenet_data.py`:
  DATA/train-00000-of-01024, `image/encoded`, 1-based `image/class/label`), read as they
  are: `config.input.dataset="imagenet_records"` with `config.input.label_offset` and
  `config.num_classes`. A data directory of such shards without a manifest, given
  without that name, is an error that says which flags read it.

All three hold serialized `tf.train.Example`s with an encoded image and int64 labels
under some feature names: the input pipeline reads the records of a `records.Split`
(files, the records to skip and take of each) and parses them with `Reader.parse`, so
that sharding, shuffling, exact resume, pixel limits and evaluation padding are the
same whatever the dataset.
"""

import concurrent.futures
import dataclasses
import os
import re
import struct

import tensorflow as tf

from keras_vit_configs.common import VERIFY_MAX_BYTES
from keras_vit_data import records, splits
from keras_vit_data.records import DataError

TFDS_PREFIX = "tfds:"
IMAGENET_RECORDS = "imagenet_records"
# TensorFlow models' ImageNet layout: {split}-{i:05d}-of-{n:05d}, no suffix.
IMAGENET_SHARD = re.compile(r"^(?P<split>[a-z_]+)-\d{5}-of-\d{5}$")
IMAGENET_SYNSET_KEY = "image/class/synset"


@dataclasses.dataclass(frozen=True)
class Reader:
    """A dataset opened for reading.

    description: one line naming it (logged); num_classes, class_names (a tuple, or
    None where the data names none), multi_label: the labels; image_key, label_key:
    the example features of the encoded image and the int64 labels; label_offset:
    subtracted from every label (1 for 1-based labels); split_fn(name, strict,
    verify_max_bytes) -> records.Split; split_names: the splits it has (a TFDS dataset
    also takes slices of them)."""

    description: str
    num_classes: int
    class_names: tuple
    multi_label: bool
    split_fn: object
    split_names: tuple
    image_key: str = records.ENCODED_KEY
    label_key: str = records.LABEL_KEY
    label_offset: int = 0
    # The splits already listed (and scanned or counted): a run asks for its training
    # split in train_lib and again in every input pipeline's train_dataset.
    _splits: dict = dataclasses.field(default_factory=dict, compare=False, repr=False)

    def split(self, name, strict=False, verify_max_bytes=VERIFY_MAX_BYTES):
        """The `records.Split` of `name` (DataError naming the dataset and its splits
        when it has no such split), listed once per reader: later calls get a copy."""
        key = (name, bool(strict), int(verify_max_bytes))
        if key not in self._splits:
            self._splits[key] = self.split_fn(
                name, strict=strict, verify_max_bytes=verify_max_bytes
            )
        info = self._splits[key]
        return dataclasses.replace(info, files=list(info.files), counts=list(info.counts))

    def has_split(self, name):
        """Whether `name` is a split of the dataset (or, for TFDS, a slice of one)."""
        return re.split(r"[\[+]", name, maxsplit=1)[0] in self.split_names

    def parse(self, serialized):
        """A serialized example (scalar tf.string) -> (encoded image (), labels (L,)
        int64, offset applied)."""
        encoded, labels = records.parse_example(serialized, self.image_key, self.label_key)
        return encoded, labels - self.label_offset

    def parse_labels(self, serialized):
        """Serialized examples (B,) -> their labels (SparseTensor (B, L) int64, offset
        applied), read without the image."""
        labels = records.parse_labels(serialized, self.label_key)
        return tf.SparseTensor(
            labels.indices, labels.values - self.label_offset, labels.dense_shape
        )


def open_reader(data_dir, dataset=None, *, tfds_data_dir=None, num_classes=None, label_offset=None):
    """The `Reader` of a run's data: `dataset` (config.input.dataset) names the kind
    (None or "": our data directory; "tfds:NAME"; "imagenet_records"), `data_dir` is
    --data_dir (TFDS: `tfds_data_dir`, else `data_dir`, else TFDS's default)."""
    dataset = (dataset or "").strip()
    if dataset.startswith(TFDS_PREFIX):
        from keras_vit_data import tfds_reader  # imports tensorflow_datasets

        if data_dir and tf.io.gfile.exists(records.manifest_path(data_dir)):
            raise DataError(
                f"--data_dir={data_dir} is a make_tfrecords directory, and the config reads "
                f"--config.input.dataset={dataset}: read the directory with "
                "--config.input.dataset= (empty), or drop --data_dir (TFDS's data_dir: "
                "--config.input.tfds_data_dir)"
            )
        return tfds_reader.open_tfds(dataset[len(TFDS_PREFIX) :], tfds_data_dir or data_dir)
    if dataset == IMAGENET_RECORDS:
        return open_imagenet_records(data_dir, num_classes, label_offset)
    if dataset:
        raise DataError(
            f"--config.input.dataset={dataset!r}: expected tfds:NAME, {IMAGENET_RECORDS}, or "
            "nothing (a data directory written by tools/make_tfrecords.py)"
        )
    if label_offset:
        raise DataError(
            f"--config.input.label_offset={label_offset} applies to "
            f"--config.input.dataset={IMAGENET_RECORDS}; a make_tfrecords directory's labels "
            "start at 0"
        )
    return open_manifest(data_dir)


def as_reader(data):
    """`data` if it is a `Reader`, else the `Reader` of the data directory `data`."""
    return data if isinstance(data, Reader) else open_manifest(data)


def open_manifest(data_dir):
    """The `Reader` of a data directory written by tools/make_tfrecords.py."""
    if data_dir and tf.io.gfile.isdir(data_dir):
        if not tf.io.gfile.exists(records.manifest_path(data_dir)) and imagenet_shards(data_dir):
            raise DataError(
                f"--data_dir={data_dir}: no {records.MANIFEST}, and its shards are named as "
                "TensorFlow's ImageNet layout (train-00000-of-01024): read them as they are "
                f"with --config.input.dataset={IMAGENET_RECORDS} --config.input.label_offset=1 "
                "--config.num_classes=1000 (label_offset=0 for 0-based labels), or write "
                "them again with tools/make_tfrecords.py"
            )
    manifest = records.read_manifest(data_dir)
    names = manifest.get("class_names") or None

    def split_fn(name, strict, verify_max_bytes):
        return splits.get_split(data_dir, name, strict=strict, verify_max_bytes=verify_max_bytes)

    return Reader(
        description=f"{data_dir} ({records.MANIFEST})",
        num_classes=int(manifest["num_classes"]),
        class_names=tuple(names) if names else None,
        multi_label=bool(manifest.get("multi_label", False)),
        split_fn=split_fn,
        split_names=tuple(manifest.get("splits", {})),
    )


# --- ImageNet-layout shards ----------------------------------------------------------


def imagenet_shards(data_dir):
    """{split: sorted shard paths} of the ImageNet-layout shards in `data_dir`."""
    found = {}
    for path in sorted(tf.io.gfile.glob(os.path.join(data_dir, "*-?????-of-?????"))):
        match = IMAGENET_SHARD.match(os.path.basename(path))
        if match:
            found.setdefault(match["split"], []).append(path)
    return found


def count_records(path):
    """The number of records in the TFRecord file `path`, read from the records'
    length headers alone (a seek past each record's data, not a read of it)."""
    count, position = 0, 0
    with tf.io.gfile.GFile(path, "rb") as f:
        size = f.size()
        while position < size:
            f.seek(position)
            header = f.read(8)
            if len(header) < 8:
                raise DataError(f"{path}: a record is cut short at byte {position}")
            (length,) = struct.unpack("<Q", header)
            position += 8 + 4 + length + 4  # length, its CRC, the data, its CRC
            count += 1
    if position != size:
        raise DataError(f"{path}: the last record is cut short (file of {size} bytes)")
    return count


def open_imagenet_records(data_dir, num_classes, label_offset):
    """The `Reader` of ImageNet-layout shards (module docstring), read as they are."""
    if label_offset is None:
        raise DataError(
            f"--config.input.dataset={IMAGENET_RECORDS} needs --config.input.label_offset: 1 "
            "for TensorFlow models' 1-based ImageNet labels (0 is background), 0 for 0-based"
        )
    if not num_classes:
        raise DataError(
            f"--config.input.dataset={IMAGENET_RECORDS} needs --config.num_classes (the shards "
            "carry no class count; 1000 for ImageNet-1k)"
        )
    if not data_dir or not tf.io.gfile.isdir(data_dir):
        raise DataError(f"--data_dir={data_dir}: no such directory")
    shards = imagenet_shards(data_dir)
    if not shards:
        raise DataError(
            f"--data_dir={data_dir}: no shards named like train-00000-of-01024 "
            f"(--config.input.dataset={IMAGENET_RECORDS})"
        )

    def split_fn(name, strict, verify_max_bytes):
        del strict, verify_max_bytes  # the headers are read whole: a cut file is an error
        if name not in shards:
            raise DataError(
                f"--data_dir={data_dir}: no split {name!r} (has {', '.join(sorted(shards))})"
            )
        files = shards[name]
        with concurrent.futures.ThreadPoolExecutor(min(16, len(files))) as pool:
            counts = list(pool.map(count_records, files))
        check_imagenet_example(files[0], int(num_classes), int(label_offset))
        return records.Split(name, list(files), counts, sum(counts))

    return Reader(
        description=f"{data_dir} (ImageNet-layout shards, label_offset={label_offset})",
        num_classes=int(num_classes),
        class_names=None,
        multi_label=False,
        split_fn=split_fn,
        split_names=tuple(sorted(shards)),
        label_offset=int(label_offset),
    )


def check_imagenet_example(path, num_classes, label_offset):
    """The first record of `path` has the features the layout names and a label in
    range once `label_offset` is subtracted; else a DataError naming the shard, the
    key and the fix."""
    record = next(iter(tf.data.TFRecordDataset(path).take(1)), None)
    if record is None:
        return
    example = tf.train.Example.FromString(record.numpy())
    feature = example.features.feature
    for key, kind in ((records.ENCODED_KEY, "bytes_list"), (records.LABEL_KEY, "int64_list")):
        if key not in feature or feature[key].WhichOneof("kind") != kind:
            raise DataError(
                f"{path}: record 0 has no {kind} feature {key!r} (features: "
                f"{', '.join(sorted(feature))}); not the ImageNet layout"
            )
    labels = [value - label_offset for value in feature[records.LABEL_KEY].int64_list.value]
    if any(not 0 <= label < num_classes for label in labels):
        raise DataError(
            f"{path}: record 0 has {records.LABEL_KEY}="
            f"{list(feature[records.LABEL_KEY].int64_list.value)}, outside [0, {num_classes}) "
            f"after --config.input.label_offset={label_offset}; check label_offset and "
            "num_classes"
        )
