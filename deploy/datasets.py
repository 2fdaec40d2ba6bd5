"""Real images for calibration and comparison, as uint8 pixels at the model's
size: the Fashion-MNIST test set (Debian's IDX files) or TFRecords of
tf.train.Example in the trainer's format (tools/make_tfrecords.py).

Images are brought to the model as the serving signature does: grayscale
repeated to RGB, bilinear `tf.image.resize` (identity at the same size), then
rounded back to uint8 so that every runtime sees the same pixels.
"""

import gzip
import os

import numpy as np
import tensorflow as tf
from keras_vit_deploy import records
from keras_vit_deploy.records import DataError  # its owner is deploy/records.py

FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"
FASHION_MNIST_CLASSES = [
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


def to_model_pixels(image, image_size, where):
    """uint8 (h, w, C) with C in {1, 3} -> uint8 (H, W, 3) at `image_size`."""
    image = np.asarray(image)
    if image.ndim == 2:
        image = image[..., None]
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise DataError(
            f"{where}: image of shape {image.shape}; the model takes RGB "
            "(3 channels) or grayscale (1) images."
        )
    image = np.repeat(image, 3 // image.shape[-1], axis=-1)
    if image.shape[:2] != tuple(image_size):
        image = tf.image.resize(image, image_size).numpy()
        image = np.clip(np.round(image), 0, 255)
    return image.astype(np.uint8)


def read_idx(path):
    """An IDX file (big-endian header: zero, zero, dtype code, ndim; then the
    dimensions as uint32; then uint8 data) as a numpy array."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    if data[:3] != b"\x00\x00\x08":
        raise DataError(f"{path}: not a uint8 IDX file.")
    ndim = data[3]
    dims = np.frombuffer(data, ">u4", count=ndim, offset=4)
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def fashion_mnist_test(image_size, limit=1000, directory=FASHION_MNIST_DIR):
    """The first `limit` Fashion-MNIST test images -> (uint8 (N, H, W, 3), labels (N,))."""
    paths = [
        os.path.join(directory, f"t10k-{kind}-ubyte.gz") for kind in ("images-idx3", "labels-idx1")
    ]
    missing = [path for path in paths if not os.path.isfile(path)]
    if missing:
        raise DataError(
            f"Fashion-MNIST test files missing: {', '.join(missing)} (install the "
            "Debian package dataset-fashion-mnist: `make data`), or pass "
            "--eval_data=TFRECORD_GLOB."
        )
    images, labels = (read_idx(path)[:limit] for path in paths)
    pixels = np.stack(
        [to_model_pixels(image, image_size, f"{paths[0]}[{i}]") for i, image in enumerate(images)]
    )
    return pixels, labels.astype(np.int64)


def tfrecord_images(pattern, image_size, limit=1000):
    """The first `limit` examples of the TFRecord files matching `pattern`
    (sorted) -> (uint8 (N, H, W, 3), labels (N,) int64, -1 where absent)."""
    files = sorted(tf.io.gfile.glob(pattern))
    if not files:
        raise DataError(f"no TFRecord files match {pattern!r}.")
    pixels, labels = [], []
    for path in files:
        for index, record in enumerate(tf.data.TFRecordDataset(path)):
            where = f"{path} record {index}"
            try:
                encoded, label = records.parse_example(record)
                image = tf.io.decode_image(encoded, channels=0, expand_animations=False).numpy()
            except tf.errors.InvalidArgumentError as e:
                raise DataError(
                    f"{where}: not a tf.train.Example with a decodable "
                    f"'{records.ENCODED_KEY}' image ({e.message.splitlines()[0]})."
                ) from e
            pixels.append(to_model_pixels(image, image_size, where))
            label = label.numpy()
            labels.append(int(label[0]) if len(label) else -1)
            if len(pixels) == limit:
                return np.stack(pixels), np.asarray(labels, np.int64)
    return np.stack(pixels), np.asarray(labels, np.int64)


def load_images(pattern, image_size, limit, fashion_mnist_dir=FASHION_MNIST_DIR):
    """`tfrecord_images(pattern)`, or the Fashion-MNIST test set when `pattern` is empty."""
    if pattern:
        return tfrecord_images(pattern, image_size, limit)
    return fashion_mnist_test(image_size, limit, fashion_mnist_dir)
