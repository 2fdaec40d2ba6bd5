r"""Writes sharded TFRecords of `tf.train.Example`s for the trainers.

  python tools/make_tfrecords.py --source=fashion_mnist --output_dir=DATA
  python tools/make_tfrecords.py --source=folder:PATH --output_dir=DATA
  python tools/make_tfrecords.py --source=tfds:cifar10 --output_dir=DATA

Each Example holds the encoded image (PNG or JPEG bytes, as found; raw arrays are
PNG-encoded) and its labels (one, or several for multi-label data); the shards are
DATA/{split}-{i:05d}-of-{n:05d}.tfrecord and DATA/manifest.json lists splits,
counts, class names, shards and label kind: the format of deploy/records.py.

Every image is checked before it is written: one that is not a JPEG, PNG, GIF or BMP
image, declares more than --max_pixels pixels in its header (read before decoding,
deploy/image_header.py: the limit the input pipeline and the serving signatures
apply) or does not decode is skipped, counted and named (--strict: an error).

folder:PATH expects PATH/{split}/{class_name}/*.{png,jpg,jpeg} with split train,
validation (or val/, eval/) or test; a folder without split subfolders is one `train`
split. --holdout=0.1 writes a stratified tenth of train as `validation`, for data that
has none (folder: and fashion_mnist sources) (tools/holdout.py; the manifest records the seed and the per-class counts).
Output is deterministic: a folder's examples are written in an order shuffled with
--seed (not sorted by class), other sources in their own order; shards are contiguous
slices.
"""

import logging
import os
import sys

import numpy as np
from absl import app, flags
from keras_vit_trainers import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported (by keras_vit_deploy): our lines only

from keras_vit_deploy import image_header, records
from keras_vit_deploy.datasets import (  # one owner of each
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_DIR,
    read_idx,
)
from keras_vit_deploy.records import DataError
from keras_vit_tools import holdout as holdout_lib

FLAGS = flags.FLAGS
flags.DEFINE_string("source", "fashion_mnist", "fashion_mnist | folder:PATH | tfds:NAME[:CONFIG]")
flags.DEFINE_string("output_dir", None, "Where the shards and manifest.json go.")
flags.DEFINE_string(
    "fashion_mnist_dir",
    FASHION_MNIST_DIR,
    "IDX files (Debian package dataset-fashion-mnist).",
)
flags.DEFINE_integer("examples_per_shard", 10000, "Examples per shard (approx).")
flags.DEFINE_string("tfds_data_dir", None, "TFDS data_dir for --source=tfds:.")
flags.DEFINE_list("splits", None, "Splits to write (default: all the source has).")
flags.DEFINE_integer("max_examples", None, "Keep the first N of each split (tests).")
flags.DEFINE_bool("progress", True, "Show a progress bar.")
flags.DEFINE_bool(
    "strict",
    False,
    "An image that does not decode (or is above --max_pixels) is fatal (default: "
    "skipped, counted in the manifest and named in a warning).",
)
flags.DEFINE_float(
    "holdout",
    None,
    "folder: and fashion_mnist sources (no validation split): the fraction of train written as a "
    "stratified, seeded `validation` split (e.g. 0.1).",
)
flags.DEFINE_integer("seed", 0, "folder: sources: the seed of the write order and --holdout.")
flags.DEFINE_integer(
    "max_pixels",
    image_header.DEFAULT_MAX_PIXELS,
    "Skip an image whose header declares more pixels (height x width), before decoding it.",
    lower_bound=1,
)

IMAGE_EXTS = (".png", ".jpg", ".jpeg")
MAX_NAMED_SKIPS = 100  # the manifest names at most this many skipped examples per split

log = logging.getLogger("tools")


def _tf():
    import tensorflow as tf

    return tf


def encode_png(array):
    array = np.asarray(array, np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    return _tf().io.encode_png(array).numpy()


# --- sources: each returns {split: (count, iterator of (encoded, labels))}, class names, multi_label


def fashion_mnist_source(directory, holdout=None, seed=0):
    """The Debian IDX files as `train` and `test`; `holdout`: that fraction of train
    written as a stratified `validation` split (tools/holdout.py, recorded in the
    manifest). Returns (splits, class_names, multi_label, manifest entries)."""
    splits, extra = {}, {}
    for split, prefix in (("train", "train"), ("test", "t10k")):
        paths = [
            os.path.join(directory, f"{prefix}-{kind}-ubyte.gz")
            for kind in ("images-idx3", "labels-idx1")
        ]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise FileNotFoundError(
                f"Fashion-MNIST IDX file(s) missing: {', '.join(missing)}. Install the Debian "
                "package `dataset-fashion-mnist` (make data) or pass --fashion_mnist_dir, or use "
                "--source=tfds:fashion_mnist."
            )
        images, labels = read_idx(paths[0]), read_idx(paths[1])
        parts = {split: np.arange(len(labels))}
        if holdout and split == "train":
            kept, held = holdout_lib.split(labels, len(FASHION_MNIST_CLASSES), holdout, seed)
            extra["holdout"] = holdout_lib.describe(
                labels, kept, held, FASHION_MNIST_CLASSES, holdout, seed
            )
            parts = {"train": kept, "validation": held}
        for name, rows in parts.items():
            splits[name] = (len(rows), _idx_examples(images, labels, rows))
    return splits, FASHION_MNIST_CLASSES, False, extra


def _idx_examples(images, labels, rows):
    for i in rows:
        yield encode_png(images[i]), labels[i]


# Held-out folders a class-folder data set may have, and the split each is written as.
FOLDER_SPLITS = {
    "train": "train",
    "validation": "validation",
    "val": "validation",
    "eval": "validation",
    "test": "test",
}


def folder_source(root, holdout=None, seed=0):
    """ROOT/[split/]CLASS_NAME/*.{png,jpg,jpeg} as splits (`FOLDER_SPLITS`; a folder
    without split subfolders is one `train` split), each in a seeded random order (not
    sorted by class). `holdout`: the fraction of `train` written as a stratified
    `validation` split (tools/holdout.py), for data without one; the manifest records
    it under `holdout`. Returns (splits, class_names, multi_label, manifest entries)."""
    if not os.path.isdir(root):
        raise FileNotFoundError(f"--source=folder:{root}: no such directory")
    subdirs = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    split_dirs = {}
    for d in subdirs:
        split = FOLDER_SPLITS.get(d)
        if split is None:
            continue
        if split in split_dirs:
            raise ValueError(
                f"--source=folder:{root}: both {os.path.basename(split_dirs[split])}/ and {d}/ "
                f"would be the {split!r} split; keep one"
            )
        split_dirs[split] = os.path.join(root, d)
    if not split_dirs:
        split_dirs = {"train": root}
    class_names = sorted(
        {c for d in split_dirs.values() for c in os.listdir(d) if os.path.isdir(os.path.join(d, c))}
    )
    if len(class_names) < 2:
        raise ValueError(
            f"--source=folder:{root}: {len(class_names)} class folder(s) "
            f"{class_names}; a classifier needs at least two "
            f"(expected {root}/[split/]CLASS_NAME/*.jpg)"
        )
    index = {c: i for i, c in enumerate(class_names)}
    files = {
        split: [
            (os.path.join(d, c, f), index[c])
            for c in class_names
            if os.path.isdir(os.path.join(d, c))
            for f in sorted(os.listdir(os.path.join(d, c)))
            if f.lower().endswith(IMAGE_EXTS)
        ]
        for split, d in split_dirs.items()
    }
    extra = {}
    if holdout:
        if "validation" in files:
            raise ValueError(
                f"--holdout={holdout}: {split_dirs['validation']} is already a validation "
                "split; drop --holdout, or merge that folder into train/"
            )
        if "train" not in files:
            raise ValueError(f"--holdout={holdout}: {root} has no train/ folder to hold out from")
        labels = [label for _, label in files["train"]]
        kept, held = holdout_lib.split(labels, len(class_names), holdout, seed)
        extra["holdout"] = holdout_lib.describe(labels, kept, held, class_names, holdout, seed)
        files["validation"] = [files["train"][i] for i in held]
        files["train"] = [files["train"][i] for i in kept]
    splits = {}
    for number, split in enumerate(sorted(files)):
        order = np.random.default_rng([int(seed), number]).permutation(len(files[split]))
        shuffled = [files[split][i] for i in order]

        def gen(shuffled=shuffled):
            for path, label in shuffled:
                with open(path, "rb") as f:
                    yield f.read(), label, path

        splits[split] = (len(shuffled), gen())
    extra["order"] = {"shuffled": True, "seed": int(seed)}
    return splits, class_names, False, extra


def tfds_source(name, data_dir):
    import tensorflow_datasets as tfds

    builder = tfds.builder(name, data_dir=data_dir)
    builder.download_and_prepare()
    info = builder.info
    image_key = next(
        (k for k, v in info.features.items() if isinstance(v, tfds.features.Image)), None
    )
    label_key = next((k for k in ("label", "labels", "objects") if k in info.features), None)
    if image_key is None or label_key is None:
        raise DataError(
            f"--source=tfds:{name}: an image classification dataset needs an Image feature "
            "and a 'label', 'labels' or 'objects' feature; its features are "
            f"{sorted(info.features)}."
        )
    label_feature = info.features[label_key]
    multi_label = isinstance(label_feature, tfds.features.Sequence)
    class_names = list(getattr(getattr(label_feature, "feature", label_feature), "names", []))
    splits = {}
    for split, split_info in info.splits.items():
        ds = builder.as_dataset(
            split=split, shuffle_files=False, decoders={image_key: tfds.decode.SkipDecoding()}
        )

        def gen(ds=ds):
            for ex in ds.as_numpy_iterator():
                yield ex[image_key], ex[label_key]

        splits[split] = (split_info.num_examples, gen())
    return splits, class_names, multi_label


def get_source(
    source,
    fashion_mnist_dir="/usr/share/datasets/fashion-mnist",
    tfds_data_dir=None,
    holdout=None,
    seed=0,
):
    """(splits, class_names, multi_label, manifest entries) of --source; `holdout` and
    `seed` are the folder source's (`folder_source`)."""
    if source.startswith("folder:"):
        return folder_source(source[len("folder:") :], holdout, seed)
    if source == "fashion_mnist":
        return fashion_mnist_source(fashion_mnist_dir, holdout, seed)
    if holdout:
        raise ValueError(
            f"--holdout applies to --source=folder:PATH and fashion_mnist; {source} comes "
            "with its own splits (tfds: name a validation split with --splits, or train "
            "on a slice of train)"
        )
    if source.startswith("tfds:"):
        return (*tfds_source(source[len("tfds:") :], tfds_data_dir), {})
    raise ValueError(f"--source={source!r}: expected fashion_mnist, folder:PATH or tfds:NAME")


def decodes(encoded):
    """Whether `encoded` is an image TensorFlow decodes (PNG, JPEG, GIF, BMP)."""
    tf = _tf()
    try:
        tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ValueError):
        return False


def image_problem(encoded, max_pixels=image_header.DEFAULT_MAX_PIXELS):
    """Why `encoded` is not written (a phrase), or None: it must be a JPEG, PNG, GIF
    or BMP image whose header declares at most `max_pixels` pixels (read before
    decoding) and that decodes."""
    tf = _tf()
    try:
        height, width, pixels = (int(v) for v in image_header.count_pixels(encoded))
    except tf.errors.InvalidArgumentError:  # a JPEG whose header does not parse
        return "not a decodable image"
    if pixels > max_pixels:
        return f"{height} x {width} = {pixels} pixels, more than --max_pixels={max_pixels}"
    if pixels < 0 or not decodes(encoded):
        return "not a decodable image"
    return None


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
    tf = _tf()
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
                problem = image_problem(encoded, max_pixels)
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
        split_sources, class_names, multi_label, extra = get_source(source, **source_kwargs)
    else:
        split_sources, class_names, multi_label = source
        split_sources = {
            k: (n, ((e if isinstance(e, bytes) else encode_png(e), l, *rest) for e, l, *rest in it))
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


def main(argv):
    del argv
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    try:
        manifest = make_tfrecords(
            FLAGS.source,
            FLAGS.output_dir,
            FLAGS.examples_per_shard,
            FLAGS.splits,
            FLAGS.max_examples,
            FLAGS.progress,
            FLAGS.strict,
            FLAGS.max_pixels,
            fashion_mnist_dir=FLAGS.fashion_mnist_dir,
            tfds_data_dir=FLAGS.tfds_data_dir,
            holdout=FLAGS.holdout,
            seed=FLAGS.seed,
        )
    except (ValueError, FileNotFoundError) as e:  # DataError included
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    counts = ", ".join(
        f"{k}: {v['count']}" + (f" ({v['skipped']} skipped)" if v.get("skipped") else "")
        for k, v in manifest["splits"].items()
    )
    print(f"Wrote {FLAGS.output_dir} ({counts}; {manifest['num_classes']} classes)")


if __name__ == "__main__":
    console.run_app(main)
