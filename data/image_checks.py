"""The checks an image passes before it is written to a data directory
(`image_problem`): a JPEG, PNG, GIF or BMP whose header declares at most `max_pixels`
pixels (read before decoding, `image_header`) and that decodes; and `encode_png` for
images that come as arrays, with `array_problem`, their check.

`encode_png` is written here with zlib, not TensorFlow's encoder: writing a data
directory from arrays (Fashion-MNIST) imports no TensorFlow (data/tfrecord_file.py
says why), and every writer (serial, parallel, a source's own) encodes an array into
the same bytes. TensorFlow is imported only to check encoded bytes."""

import struct
import zlib

import numpy as np

from keras_vit_data import image_header

# PNG colour type by channels: grey, grey + alpha, RGB, RGBA
PNG_COLOUR_TYPES = {1: 0, 2: 4, 3: 2, 4: 6}
PNG_COMPRESSION = 6  # zlib's default level


def _chunk(kind, data):
    return (
        struct.pack(">I", len(data))
        + kind
        + data
        + struct.pack(">I", zlib.crc32(data, zlib.crc32(kind)))
    )


_IEND = _chunk(b"IEND", b"")


def encode_png(array):
    """uint8 (H, W) or (H, W, C) with 1 to 4 channels -> PNG bytes (8 bits a sample,
    no interlace, filter 0 on every row). ValueError for another shape."""
    array = np.asarray(array, np.uint8)
    if array.ndim == 2:
        array = array[..., None]
    if array.ndim != 3 or array.shape[2] not in PNG_COLOUR_TYPES:
        raise ValueError(
            f"an image array of shape {array.shape}: expected (H, W) or (H, W, C), C 1 to 4"
        )
    height, width, channels = array.shape
    rows = np.zeros((height, 1 + width * channels), np.uint8)  # a filter byte 0 each
    rows[:, 1:] = array.reshape(height, width * channels)
    header = struct.pack(">IIBBBBB", width, height, 8, PNG_COLOUR_TYPES[channels], 0, 0, 0)
    return b"".join(
        (
            image_header.PNG,
            _chunk(b"IHDR", header),
            _chunk(b"IDAT", zlib.compress(rows.tobytes(), PNG_COMPRESSION)),
            _IEND,
        )
    )


def array_problem(array, max_pixels=image_header.DEFAULT_MAX_PIXELS):
    """(PNG bytes, why it is not written or None) of a uint8 array, without
    TensorFlow: the PNG `encode_png` writes decodes, and its header gives the array's
    size, so the one check left is that size (as `image_problem`'s)."""
    encoded = encode_png(array)
    height, width = np.shape(array)[:2]
    pixels = height * width
    if pixels > max_pixels:
        return encoded, (
            f"{height} x {width} = {pixels} pixels, more than --max_pixels={max_pixels}"
        )
    if not pixels:
        return encoded, "not a decodable image"
    return encoded, None


def decodes(encoded):
    """Whether `encoded` is an image TensorFlow decodes (PNG, JPEG, GIF, BMP)."""
    import tensorflow as tf

    try:
        tf.io.decode_image(encoded, channels=3, expand_animations=False)
        return True
    except (tf.errors.InvalidArgumentError, tf.errors.UnknownError, ValueError):
        return False


def image_problem(encoded, max_pixels=image_header.DEFAULT_MAX_PIXELS):
    """Why `encoded` is not written (a phrase), or None: it must be a JPEG, PNG, GIF
    or BMP image whose header declares at most `max_pixels` pixels (read before
    decoding) and that decodes."""
    import tensorflow as tf

    try:
        height, width, pixels = (int(v) for v in image_header.count_pixels(encoded))
    except tf.errors.InvalidArgumentError:  # a JPEG whose header does not parse
        return "not a decodable image"
    if pixels > max_pixels:
        return f"{height} x {width} = {pixels} pixels, more than --max_pixels={max_pixels}"
    if pixels < 0 or not decodes(encoded):
        return "not a decodable image"
    return None
