"""Fashion-MNIST as Debian's package `dataset-fashion-mnist` installs it: gzipped IDX
files `{train,t10k}-{images-idx3,labels-idx1}-ubyte.gz` in `FASHION_MNIST_DIR`, read
without TensorFlow (`read_idx`, `read_split`)."""

import gzip
import os

import numpy as np

from keras_vit_data.records import DataError

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
CLASS_NAMES = [
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
]
# A split's name -> the prefix of its IDX files.
SPLIT_PREFIXES = {"train": "train", "test": "t10k"}


def read_idx(path):
    """A gzipped IDX file (big-endian header: zero, zero, dtype code, ndim; then the
    dimensions as uint32; then uint8 data) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\x00\x00\x08":
        raise DataError(f"{path}: not a uint8 IDX file.")
    ndim = data[3]
    dims = np.frombuffer(data, ">u4", count=ndim, offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def split_paths(directory, split):
    """(images file, labels file) of `split` ('train' or 'test') in `directory`."""
    prefix = SPLIT_PREFIXES[split]
    return tuple(
        os.path.join(directory, f"{prefix}-{kind}-ubyte.gz")
        for kind in ("images-idx3", "labels-idx1")
    )


def available(directory=FASHION_MNIST_DIR):
    """Whether `directory` holds all four IDX files."""
    return all(os.path.isfile(p) for split in SPLIT_PREFIXES for p in split_paths(directory, split))


def source_name(directory=FASHION_MNIST_DIR):
    """The `make_tfrecords` source of Fashion-MNIST here: the IDX files where they are
    installed, else TensorFlow Datasets' `fashion_mnist` (a download)."""
    return "fashion_mnist" if available(directory) else "tfds:fashion_mnist"


def read_split(directory, split, alternative=""):
    """(uint8 images (N, 28, 28), uint8 labels (N,)) of `split`; a DataError naming the
    missing files, the Debian package and `alternative` (another way the caller offers)."""
    paths = split_paths(directory, split)
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise DataError(
            f"Fashion-MNIST IDX file(s) missing: {', '.join(missing)}. Install the Debian "
            "package dataset-fashion-mnist (`make data`)"
            + (f", or {alternative}" if alternative else "")
            + "."
        )
    return read_idx(paths[0]), read_idx(paths[1])
