"""Writes a data directory: each split's shards of `tf.train.Example`s and, last, its
manifest (`records`): `make_tfrecords` from a source (`sources`) or from arrays, and
`ensure_records` for the programs that need a data directory and write it only when
it is missing (tools/demo.py, the benchmarks).

Every image is checked before it is written (`images.image_problem`): one that is not
a JPEG, PNG, GIF or BMP image, declares more than `max_pixels` pixels or does not
decode is skipped, counted and named in the manifest (`strict`: an error).
"""

import logging
import os

import tensorflow as tf
from keras_vit_cli import console

from keras_vit_data import image_header, image_checks, records, sources
from keras_vit_data.records import DataError

MAX_NAMED_SKIPS = 100  # the manifest names at most this many skipped examples per split

log = logging.getLogger("data")


def write_split(
    output_dir,
    split,
    count,
    examples,
    examples_per_shard,
    progress=True,
    strict=False,
    max_pixels=image_header.DEFAULT_MAX_PIXELS,
):
    """Writes one split's shards; every image is checked first (`image_problem`), and
    one that fails is skipped (counted, named in the manifest and a warning) or, with
    `strict`, fatal. `examples` yields (encoded, labels) or (encoded, labels, name)."""
    num_shards = max(1, -(-count // examples_per_shard))
    per_shard = -(-count // num_shards)
    shards, written, skipped = [], 0, []
    bar = None
    if progress:
        bar = console.Progress(count, f"writing {split}", unit="image")
    examples = iter(examples)
    for s in range(num_shards):
        name = records.shard_name(split, s, num_shards)
        n = 0
        with tf.io.TFRecordWriter(os.path.join(output_dir, name)) as w:
            for encoded, labels, *ident in examples:
                problem = image_checks.image_problem(encoded, max_pixels)
                if problem:
                    what = ident[0] if ident else f"{split} example {written + n + len(skipped)}"
                    if strict:
                        raise DataError(
                            f"{what}: {problem} ({len(encoded)} bytes); "
                            "remove it, or drop --strict to skip such files"
                        )
                    log.warning("skipping %s: %s (%d bytes)", what, problem, len(encoded))
                    skipped.append(what)
                    if bar:
                        bar.update(1)
                    continue
                w.write(records.serialize_example(encoded, labels))
                n += 1
                if bar:
                    bar.update(1)
                if n == per_shard:
                    break
        shards.append({"file": name, "count": n})
        written += n
    if bar:
        bar.close()
    result = {"count": written, "shards": shards}
    if skipped:
        result["skipped"] = len(skipped)
        result["skipped_examples"] = skipped[:MAX_NAMED_SKIPS]
        log.warning(
            "%s: skipped %d of %d examples that are not decodable images of at most %d pixels",
            split,
            len(skipped),
            written + len(skipped),
            max_pixels,
        )
    return result


def make_tfrecords(
    source,
    output_dir,
    examples_per_shard=10000,
    splits=None,
    max_examples=None,
    progress=True,
    strict=False,
    max_pixels=image_header.DEFAULT_MAX_PIXELS,
    **source_kwargs,
):
    """Writes the shards and manifest; returns the manifest dict. Images above
    `max_pixels` pixels are skipped as those that do not decode (`write_split`).

    `source` is a name as for --source, or a tuple (splits, class_names, multi_label)
    with splits {name: (count, iterable of (encoded_bytes_or_uint8_array, labels))}.
    """
    extra = {}
    if isinstance(source, str):
        split_sources, class_names, multi_label, extra = sources.get_source(source, **source_kwargs)
    else:
        split_sources, class_names, multi_label = source
        split_sources = {
            k: (
                n,
                (
                    (e if isinstance(e, bytes) else image_checks.encode_png(e), l, *rest)
                    for e, l, *rest in it
                ),
            )
            for k, (n, it) in split_sources.items()
        }
        source = "arrays"
    os.makedirs(output_dir, exist_ok=True)
    # A manifest left from an earlier run would describe shards this one overwrites: an
    # interrupted run must leave none, so that training refuses the folder.
    records.remove_manifest(output_dir)
    manifest = {
        "source": source,
        "format": "tf.train.Example",
        "features": dict(records.FEATURE_DESCRIPTIONS),
        "num_classes": len(class_names),
        "class_names": class_names,
        "multi_label": multi_label,
        "max_pixels": max_pixels,
        **extra,
        "splits": {},
    }
    for split, (count, examples) in split_sources.items():
        if splits and split not in splits:
            continue
        if max_examples:
            count = min(count, max_examples)
            examples = (e for _, e in zip(range(count), examples))
        manifest["splits"][split] = write_split(
            output_dir, split, count, examples, examples_per_shard, progress, strict, max_pixels
        )
    records.write_manifest(output_dir, manifest)  # whole or absent, never cut short
    return manifest


def ensure_records(source, data_dir, progress=True, **kwargs):
    """The manifest of `data_dir`, writing the folder from `source` first
    (`make_tfrecords(source, data_dir, **kwargs)`) when it has no manifest. A folder
    written from another source, or with another `holdout` fraction, is refused (a
    DataError naming both), so that a program never uses data it did not ask for."""
    if tf.io.gfile.exists(records.manifest_path(data_dir)):
        manifest = records.read_manifest(data_dir)
        holdout = kwargs.get("holdout")
        found = (manifest.get("source"), manifest.get("holdout", {}).get("fraction"))
        wanted = (source, float(holdout) if holdout else None)
        if found != wanted:
            raise DataError(
                f"{data_dir} holds records of source={found[0]!r} holdout={found[1]}, not "
                f"source={wanted[0]!r} holdout={wanted[1]}: give another data directory, "
                "or remove that one"
            )
        return manifest
    log.info("writing TFRecords (%s) to %s", source, data_dir)
    return make_tfrecords(source, data_dir, progress=progress, **kwargs)
