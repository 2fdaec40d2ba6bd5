"""The checks an image passes before it is written to a data directory
(`image_problem`): a JPEG, PNG, GIF or BMP whose header declares at most `max_pixels`
pixels (read before decoding, `image_header`), that is whole and that decodes; and
`encode_png` for images that come as arrays, with `array_problem`, their check.

A file that fails is skipped for one of `REASONS` (a `Problem`: the phrase, and its
reason): not an image (none of those formats: a .txt, a WebP), too large, truncated
(a JPEG cut before its end-of-image marker, a PNG before its IEND chunk: found from
the bytes, so that libjpeg never prints its 'Premature end of JPEG data' line), or
undecodable (anything else TensorFlow's decoder refuses).

Alpha (an RGBA or grey + alpha PNG, a palette PNG with transparency) is dropped, the
colours kept as stored, by the one rule of data and serving alike: the trainers'
decoder (`tf.io.decode_image(channels=3)`) and the serving signatures
(deploy/preprocessing.py) both do so; `has_alpha` finds such PNGs, which the writer
counts (docs/data.md).

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

# Why an image is skipped: its key in the manifest's `skipped_by_reason`, and its words.
REASONS = {
    "not_an_image": "not an image",
    "too_large": "too large",
    "truncated": "truncated",
    "undecodable": "undecodable",
}


class Problem(str):
    """Why an image is not written: the phrase itself (a str, as logged and raised),
    and `reason`, its key in `REASONS`."""

    reason: str

    def __new__(cls, reason, phrase):
        if reason not in REASONS:
            raise ValueError(f"unknown reason {reason!r}: expected one of {list(REASONS)}")
        problem = super().__new__(cls, phrase)
        problem.reason = reason
        return problem


def undecodable():
    return Problem("undecodable", "not a decodable image")


def too_large(height, width, pixels, max_pixels):
    return Problem(
        "too_large", f"{height} x {width} = {pixels} pixels, more than --max_pixels={max_pixels}"
    )


def is_image(encoded):
    """Whether `encoded` starts as a JPEG, PNG, GIF or BMP does."""
    return bytes(encoded[:8]).startswith(image_header.MAGIC)


def truncated(encoded):
    """Whether `encoded`, a JPEG or PNG, ends before its last marker: a JPEG without
    an end-of-image (FF D9) after its last start-of-scan (FF DA) (entropy-coded data
    stuffs every FF, so neither appears inside a scan; an embedded thumbnail's markers
    come before the image's own), a PNG without its IEND chunk (fixed bytes, CRC
    included). Other formats: False (their decoder refuses them when cut)."""
    encoded = bytes(encoded)
    if encoded.startswith(image_header.JPEG):
        end = encoded.rfind(b"\xff\xd9")
        return end < 0 or end < encoded.rfind(b"\xff\xda")
    if encoded.startswith(image_header.PNG):
        return _IEND not in encoded
    return False


def has_alpha(encoded):
    """Whether `encoded` is a PNG with an alpha channel (colour type 4 or 6) or a
    transparent palette (a tRNS chunk): what decoding with channels=3 drops."""
    encoded = bytes(encoded)
    if not encoded.startswith(image_header.PNG) or len(encoded) < 26:
        return False
    if encoded[25] in (4, 6):
        return True
    idat = encoded.find(b"IDAT")
    return b"tRNS" in encoded[: idat if idat > 0 else len(encoded)]


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
        return encoded, too_large(height, width, pixels, max_pixels)
    if not pixels:
        return encoded, undecodable()
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
    """Why `encoded` is not written (a `Problem`), or None: it must be a JPEG, PNG,
    GIF or BMP image, not `truncated`, whose header declares at most `max_pixels`
    pixels (read before decoding) and that decodes."""
    if not is_image(encoded):
        return Problem("not_an_image", f"not a {image_header.FORMATS} image")
    if truncated(encoded):
        return Problem("truncated", "truncated (the file ends before the image does)")
    import tensorflow as tf

    try:
        height, width, pixels = (int(v) for v in image_header.count_pixels(encoded))
    except tf.errors.InvalidArgumentError:  # a JPEG whose header does not parse
        return undecodable()
    if pixels > max_pixels:
        return too_large(height, width, pixels, max_pixels)
    if pixels < 0 or not decodes(encoded):
        return undecodable()
    return None
