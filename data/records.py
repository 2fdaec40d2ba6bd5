"""The record format of a data directory written by tools/make_tfrecords.py, in one
place: what an example holds, how it is written and parsed, where the manifest lives
and what it says, and which records a split (or its first N examples) is made of.

    DATA/manifest.json                        `read_manifest`, `write_manifest`
    DATA/{split}-{i:05d}-of-{n:05d}.tfrecord  `shard_name`; tf.train.Example records

An example (`serialize_example`) holds `image/encoded` (the encoded image bytes,
PNG/JPEG) and `image/class/label` (an int64 list: one label, or several for
multi-label data). The manifest is JSON: {"splits": {name: {"count", "shards":
[{"file", "count"}, ...], ...}}, "num_classes", "class_names", "multi_label", ...}.

The writer (tools/make_tfrecords.py), the trainers' input pipeline and evaluators,
and deploy/ (the serving signatures' tf.Example input, calibration images) all read
the format from here. `DataError` is the one error of unusable data.

TensorFlow is imported by the functions that parse and read records, not with the
module: the manifest and names serve a writer that imports no TensorFlow
(data/tfrecord_file.py says why); manifest paths may be remote (`files`).
"""

import dataclasses
import json
import os

import numpy as np

from keras_vit_data import files

ENCODED_KEY = "image/encoded"
LABEL_KEY = "image/class/label"
# How the manifest describes the features of an example.
FEATURE_DESCRIPTIONS = {ENCODED_KEY: "bytes (PNG/JPEG)", LABEL_KEY: "int64 list"}
MANIFEST = "manifest.json"
SHARD_SUFFIX = ".tfrecord"


class DataError(ValueError):
    """Data that cannot be used as given (a data directory, a record, an image, an IDX
    file); the message names the file. The one data error of deploy/, the trainers'
    input pipeline and tools/make_tfrecords.py."""


# --- one example -----------------------------------------------------------------


def serialize_example(encoded, labels):
    """Encoded image bytes and an int or a list of ints -> a serialized tf.train.Example."""
    import tensorflow as tf

    labels = [int(label) for label in np.atleast_1d(labels)]
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                ENCODED_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
                LABEL_KEY: tf.train.Feature(int64_list=tf.train.Int64List(value=labels)),
            }
        )
    ).SerializeToString(
        deterministic=True
    )  # map entries sorted by key: the same bytes in every process


def _features(image_key, label_key):
    import tensorflow as tf

    return {
        image_key: tf.io.FixedLenFeature([], tf.string),
        label_key: tf.io.VarLenFeature(tf.int64),
    }


def parse_example(serialized, image_key=ENCODED_KEY, label_key=LABEL_KEY):
    """A serialized example (scalar tf.string) -> (encoded image (scalar tf.string),
    labels (L,) int64). Fails (InvalidArgumentError) on bytes that are not an
    example with an image. The keys are ours by default; a dataset read as it is
    (data/readers.py: TFDS, ImageNet layout) names its own."""
    import tensorflow as tf

    features = tf.io.parse_single_example(serialized, _features(image_key, label_key))
    return features[image_key], tf.sparse.to_dense(features[label_key])


def parse_examples(serialized, missing_label=-1):
    """Serialized examples (B,) -> (encoded images (B,), labels (B, L) int64 padded
    with `missing_label`; L = 0 when no example has a label). A missing image fails
    naming the feature."""
    import tensorflow as tf

    features = tf.io.parse_example(serialized, _features(ENCODED_KEY, LABEL_KEY))
    labels = tf.sparse.to_dense(features[LABEL_KEY], default_value=missing_label)
    return features[ENCODED_KEY], labels


def parse_labels(serialized, label_key=LABEL_KEY):
    """Serialized examples (B,) -> their labels as a SparseTensor (B, L) int64,
    read without the image feature."""
    import tensorflow as tf

    features = {label_key: tf.io.VarLenFeature(tf.int64)}
    return tf.io.parse_example(serialized, features)[label_key]


# --- the manifest ------------------------------------------------------------------


def manifest_path(data_dir):
    return os.path.join(data_dir, MANIFEST)


def shard_name(split, index, num_shards):
    """The file name of shard `index` (0-based) of `num_shards` of `split`."""
    return f"{split}-{index:05d}-of-{num_shards:05d}{SHARD_SUFFIX}"


def remove_manifest(data_dir):
    """Deletes DATA/manifest.json if there is one: a folder being (re)written has none,
    so that an interrupted writer leaves a folder the readers refuse."""
    path = manifest_path(data_dir)
    if files.exists(path):
        files.remove(path)


def write_manifest(data_dir, manifest):
    """Writes DATA/manifest.json whole or not at all (a temporary file, then renamed)."""
    path = manifest_path(data_dir)
    partial = path + ".partial"
    with files.open_file(partial, "w") as f:
        json.dump(manifest, f, indent=1)
    files.rename(partial, path)


def read_manifest(data_dir):
    """DATA/manifest.json as a dict; DataError naming the folder (as --data_dir) when
    it is not given, missing, has no manifest or an unreadable one."""
    if not data_dir:
        raise DataError("--data_dir is required (a directory written by tools/make_tfrecords.py)")
    if not files.isdir(data_dir):
        raise DataError(
            f"--data_dir={data_dir}: no such directory. Create it with "
            f"`python tools/make_tfrecords.py --output_dir={data_dir}`."
        )
    path = manifest_path(data_dir)
    if not files.exists(path):
        shards = files.glob(os.path.join(data_dir, f"*{SHARD_SUFFIX}*"))
        raise DataError(
            f"--data_dir={data_dir}: no {MANIFEST}"
            + (f" (and no {SHARD_SUFFIX} shards)" if not shards else "")
            + f". Create it with `python tools/make_tfrecords.py --output_dir={data_dir}`."
        )
    try:
        with files.open_file(path) as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(
            f"{path}: not valid JSON ({e}). Write the folder again with "
            f"`python tools/make_tfrecords.py --output_dir={data_dir}`."
        ) from e


# --- the records of a split ----------------------------------------------------------


@dataclasses.dataclass
class Split:
    """The records of a split: `counts[i]` records of `files[i]` after its first
    `starts[i]` (none: 0 each; a slice of a TFDS split starts inside a file), in order."""

    name: str
    files: list  # full paths, in manifest order
    counts: list  # usable records per file
    num_examples: int
    skipped_records: int = 0
    corrupt_files: tuple = ()
    starts: tuple = ()  # records skipped at the start of each file; () for none

    def file_starts(self):
        """`starts`, or 0 for every file."""
        return list(self.starts) if self.starts else [0] * len(self.files)


def split_records(data_dir, split, manifest=None):
    """The `Split` the manifest lists for `split` (its shards are not opened);
    DataError naming the folder when the split is absent, empty or a shard is missing."""
    manifest = manifest if manifest is not None else read_manifest(data_dir)
    splits = manifest.get("splits", {})
    if split not in splits:
        raise DataError(
            f"--data_dir={data_dir}: no split {split!r} in {MANIFEST} "
            f"(has {', '.join(splits) or 'none'})"
        )
    shards = splits[split]["shards"]
    paths = [os.path.join(data_dir, s["file"]) for s in shards]
    missing = [f for f in paths if not files.exists(f)]
    if missing:
        raise DataError(
            f"--data_dir={data_dir}: shard(s) listed in {MANIFEST} are missing: "
            f"{', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
        )
    counts = [int(s["count"]) for s in shards]
    if not sum(counts):
        raise DataError(f"--data_dir={data_dir}: split {split!r} is empty")
    return Split(split, paths, counts, sum(counts))


def first_examples(info, max_examples):
    """`info` (a `Split`) cut to its first `max_examples` records in manifest order
    (files left without a record are dropped); 0, None or at least its size: `info`."""
    if not max_examples or max_examples >= info.num_examples:
        return info
    counts, left = [], int(max_examples)
    for count in info.counts:
        counts.append(min(count, left))
        left -= counts[-1]
    keep = [i for i, count in enumerate(counts) if count]
    starts = info.file_starts()
    return dataclasses.replace(
        info,
        files=[info.files[i] for i in keep],
        counts=[counts[i] for i in keep],
        num_examples=int(max_examples),
        starts=tuple(starts[i] for i in keep) if info.starts else (),
    )


def read_records(info):
    """tf.data of the serialized records of `info` (a `Split`), in manifest order:
    `counts[i]` records of each `files[i]`, after its first `starts[i]`."""
    import tensorflow as tf

    ds = tf.data.Dataset.from_tensor_slices(
        (
            info.files,
            tf.constant(info.file_starts(), tf.int64),
            tf.constant(info.counts, tf.int64),
        )
    )
    # Traced as written, without AutoGraph's source rewriting: TensorFlow ops only
    # (keras_vit_trainers.tracing says why).
    return ds.flat_map(tf.autograph.experimental.do_not_convert(file_records))


def file_records(path, start, count):
    """tf.data of `count` records of the TFRecord file `path` after its first `start`."""
    import tensorflow as tf

    return tf.data.TFRecordDataset(path).skip(start).take(count)
