"""Real images for calibration and comparison, as uint8 pixels at the model's
size: the Fashion-MNIST test set (Debian's IDX files) or TFRecords of
tf.train.Example in the trainer's format (data/records.py).

Images are brought to the model as the serving signature does: grayscale
repeated to RGB, bilinear `tf.image.resize` (identity at the same size), then
rounded back to uint8 so that every runtime sees the same pixels.
"""

import numpy as np
import tensorflow as tf

from keras_vit_data import fashion_mnist, records
from keras_vit_data.fashion_mnist import FASHION_MNIST_DIR
from keras_vit_data.records import DataError  # its owner is data/records.py


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


def fashion_mnist_test(image_size, limit=1000, directory=FASHION_MNIST_DIR):
    """The first `limit` Fashion-MNIST test images -> (uint8 (N, H, W, 3), labels (N,))."""
    images, labels = fashion_mnist.read_split(directory, "test", "pass --eval_data=TFRECORD_GLOB")
    images, labels = images[:limit], labels[:limit]
    paths = fashion_mnist.split_paths(directory, "test")
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
