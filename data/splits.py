"""The records of a split, ready to read: the shards the manifest lists
(`records.split_records`), each scanned record by record (CRC-checked) when the split
is smaller than `verify_max_bytes`: a shard that fails its check is cut at its last
good record, the lost records are counted and a warning names the shard (`strict`:
an error instead). The trainers, evaluators and few-shot evaluator read splits here.
"""

import logging
import os

import tensorflow as tf

from keras_vit_configs.common import VERIFY_MAX_BYTES
from keras_vit_data import records
from keras_vit_data.records import DataError


def _scan(path, expected, strict):
    """Returns the number of good records at the start of `path` (CRC-checked)."""
    n = 0
    try:
        for _ in tf.data.TFRecordDataset(path):
            n += 1
    except (
        tf.errors.DataLossError,
        tf.errors.OutOfRangeError,
        tf.errors.InvalidArgumentError,
    ) as e:
        if strict:
            raise DataError(f"corrupt shard {path} after {n} records: {e.message}") from e
        return n, e.message.splitlines()[0]
    if n != expected:
        msg = f"{n} records, manifest says {expected}"
        if strict:
            raise DataError(f"shard {path}: {msg}")
        return n, msg
    return n, None


def get_split(data_dir, split, strict=False, verify_max_bytes=VERIFY_MAX_BYTES):
    """Locates a split's shards; scans them for corruption when they are small enough."""
    result = records.split_records(data_dir, split)
    files, counts = result.files, list(result.counts)
    if sum(tf.io.gfile.stat(f).length for f in files) > verify_max_bytes:
        return result
    corrupt = []
    for i, (f, c) in enumerate(zip(files, counts)):
        good, err = _scan(f, c, strict)
        if err:
            corrupt.append(os.path.basename(f))
            result.counts[i] = min(good, c)
            logging.warning(
                "corrupt shard %s: %s; using its first %d of %d records",
                f,
                err,
                result.counts[i],
                c,
            )
    result.skipped_records = sum(counts) - sum(result.counts)
    result.num_examples = sum(result.counts)
    result.corrupt_files = tuple(corrupt)
    if corrupt:
        logging.warning(
            "split %r: skipped %d record(s) in %d corrupt shard(s): %s",
            split,
            result.skipped_records,
            len(corrupt),
            ", ".join(corrupt),
        )
    if not result.num_examples:
        raise DataError(f"--data_dir={data_dir}: split {split!r} has no readable records")
    return result


def first_examples(info, max_examples):
    """`info` limited to its first `max_examples` records in manifest order
    (`config.train_examples`, e.g. a small labelled subset); 0/None: all. More than
    the split holds is a DataError."""
    if max_examples and max_examples > info.num_examples:
        raise DataError(
            f"config.train_examples={max_examples}: split {info.name!r} has only "
            f"{info.num_examples} usable examples"
        )
    return records.first_examples(info, max_examples)
