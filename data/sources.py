"""What `make_tfrecords --source=` reads, each as
(splits, class_names, multi_label, manifest entries) with splits
{name: (count, iterator of (encoded image, labels[, name]))}:

- `fashion_mnist`: Debian's IDX files (`fashion_mnist`), `train` and `test`;
- `folder:PATH`: every file of PATH/[split/]CLASS_NAME/ (`FOLDER_SPLITS`), each split
  in a seeded random order (not sorted by class); the writer skips, and counts by
  reason, the files that are not images it reads;
- `tfds:NAME[:CONFIG]`: a TensorFlow Datasets builder, its images left encoded.

The examples of `fashion_mnist` and `folder:` are `Lazy` sequences: an example is made
(a file read, an image PNG-encoded) when it is indexed or iterated over, so that a
writer task (`writer.write_split`) slices out its own examples without touching the
others'. `arrays=True` leaves Fashion-MNIST's images as uint8 arrays, for a writer
that PNG-encodes them itself (in parallel).

`holdout` (fashion_mnist and folder: sources) writes a stratified, seeded fraction of
train as `validation` (`holdout`, recorded in the manifest).
"""

import collections.abc
import os

import numpy as np

from keras_vit_data import fashion_mnist, image_checks
from keras_vit_data import files as paths
from keras_vit_data import holdout as holdout_lib
from keras_vit_data.records import DataError


class Lazy(collections.abc.Sequence):
    """`count` examples, example i made by `make(i)` when it is read; a slice is
    another `Lazy` (nothing is made)."""

    def __init__(self, count, make, offset=0):
        self._count, self._make, self._offset = count, make, offset

    def __len__(self):
        return self._count

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(self._count)
            if step != 1:
                raise ValueError("Lazy: only contiguous slices")
            return Lazy(max(0, stop - start), self._make, self._offset + start)
        if not -self._count <= i < self._count:
            raise IndexError(i)
        return self._make(self._offset + i % self._count)


def fashion_mnist_source(directory, holdout=None, seed=0, arrays=False):
    """The Debian IDX files as `train` and `test`; `holdout`: that fraction of train
    written as a stratified `validation` split (`holdout`, recorded in the
    manifest); `arrays`: images as uint8 (28, 28) arrays, not PNG bytes. Returns
    (splits, class_names, multi_label, manifest entries)."""
    splits, extra = {}, {}
    for split in ("train", "test"):
        images, labels = fashion_mnist.read_split(
            directory, split, "pass --fashion_mnist_dir, or use --source=tfds:fashion_mnist"
        )
        parts = {split: np.arange(len(labels))}
        if holdout and split == "train":
            kept, held = holdout_lib.split(labels, len(fashion_mnist.CLASS_NAMES), holdout, seed)
            extra["holdout"] = holdout_lib.describe(
                labels, kept, held, fashion_mnist.CLASS_NAMES, holdout, seed
            )
            parts = {"train": kept, "validation": held}
        for name, rows in parts.items():
            splits[name] = (len(rows), Lazy(len(rows), _idx_example(images, labels, rows, arrays)))
    return splits, fashion_mnist.CLASS_NAMES, False, extra


def _idx_example(images, labels, rows, arrays):
    def make(i):
        image = images[rows[i]]
        return (image if arrays else image_checks.encode_png(image)), labels[rows[i]]

    return make


# Held-out folders a class-folder data set may have, and the split each is written as.
FOLDER_SPLITS = {
    "train": "train",
    "validation": "validation",
    "val": "validation",
    "eval": "validation",
    "test": "test",
}


# An image folder may be local or remote (gs://..., any filesystem tf.io.gfile knows):
# `paths` (data/files.py) reads a local one through os, as it always has.


def folder_source(root, holdout=None, seed=0):
    """Every file of ROOT/[split/]CLASS_NAME/ as splits (`FOLDER_SPLITS`; a folder
    without split subfolders is one `train` split), each in a seeded random order (not
    sorted by class). `holdout`: the fraction of `train` written as a stratified
    `validation` split (`holdout`), for data without one; the manifest records
    it under `holdout`. Returns (splits, class_names, multi_label, manifest entries)."""
    if not paths.isdir(root):
        raise FileNotFoundError(f"--source=folder:{root}: no such directory")
    subdirs = sorted(d for d in paths.listdir(root) if paths.isdir(os.path.join(root, d)))
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
        {
            c
            for d in split_dirs.values()
            for c in paths.listdir(d)
            if paths.isdir(os.path.join(d, c))
        }
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
            if paths.isdir(os.path.join(d, c))
            for f in sorted(paths.listdir(os.path.join(d, c)))
            if not paths.isdir(os.path.join(d, c, f))  # every file: written, or skipped by reason
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
        splits[split] = (len(shuffled), Lazy(len(shuffled), _file_example(shuffled)))
    extra["order"] = {"shuffled": True, "seed": int(seed)}
    return splits, class_names, False, extra


def _file_example(files):
    def make(i):
        path, label = files[i]
        return paths.read_bytes(path), label, path

    return make


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
    fashion_mnist_dir=fashion_mnist.FASHION_MNIST_DIR,
    tfds_data_dir=None,
    holdout=None,
    seed=0,
    arrays=False,
):
    """(splits, class_names, multi_label, manifest entries) of --source; `holdout` and
    `seed` are the folder source's (`folder_source`), `arrays` Fashion-MNIST's
    (`fashion_mnist_source`)."""
    if source.startswith("folder:"):
        return folder_source(source[len("folder:") :], holdout, seed)
    if source == "fashion_mnist":
        return fashion_mnist_source(fashion_mnist_dir, holdout, seed, arrays)
    if holdout:
        raise ValueError(
            f"--holdout applies to --source=folder:PATH and fashion_mnist; {source} comes "
            "with its own splits (tfds: name a validation split with --splits, or train "
            "on a slice of train)"
        )
    if source.startswith("tfds:"):
        return (*tfds_source(source[len("tfds:") :], tfds_data_dir), {})
    raise ValueError(f"--source={source!r}: expected fashion_mnist, folder:PATH or tfds:NAME")
