"""The checks an image passes before it is written to a data directory
(`image_problem`): a JPEG, PNG, GIF or BMP whose header declares at most `max_pixels`
pixels (read before decoding, `image_header`) and that decodes; and `encode_png` for
images that come as arrays."""

import numpy as np
import tensorflow as tf

from keras_vit_data import image_header


def encode_png(array):
    """uint8 (H, W) or (H, W, C) -> PNG bytes."""
    array = np.asarray(array, np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    return tf.io.encode_png(array).numpy()


def decodes(encoded):
    """Whether `encoded` is an image TensorFlow decodes (PNG, JPEG, GIF, BMP)."""
    try:
        tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ValueError):
        return False


def image_problem(encoded, max_pixels=image_header.DEFAULT_MAX_PIXELS):
    """Why `encoded` is not written (a phrase), or None: it must be a JPEG, PNG, GIF
    or BMP image whose header declares at most `max_pixels` pixels (read before
    decoding) and that decodes."""
    try:
        height, width, pixels = (int(v) for v in image_header.count_pixels(encoded))
    except tf.errors.InvalidArgumentError:  # a JPEG whose header does not parse
        return "not a decodable image"
    if pixels > max_pixels:
        return f"{height} x {width} = {pixels} pixels, more than --max_pixels={max_pixels}"
    if pixels < 0 or not decodes(encoded):
        return "not a decodable image"
    return None
