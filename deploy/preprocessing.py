"""In-graph input handling of the serving signatures: decoding, checking and
scaling images as the trainer's eval pipeline does (trainers/input_pipeline.py:
decode, grayscale -> RGB, bilinear `tf.image.resize`, then the model's
normalisation: `keras_vit.preprocess_input` with its `preprocessing`, the
authors' x / PIXEL_SCALE - 1 unless a timm / transformers file said otherwise).

Images are brought to the model's channel count C: for C = 3, grayscale is
repeated to RGB; for C = 1 (a grey model, e.g. RGB weights adapted with
`input_shape=(H, W, 1)`), RGB becomes its luma (ITU-R BT.601: 0.299 R + 0.587 G +
0.114 B, weights that add up to 1, so a grey image stored as RGB is itself);
other C take images of exactly C channels (a 4-channel PNG for C = 4).

Alpha: a grey or RGB model (C = 1 or 3) takes images with alpha too (an RGBA or
grey + alpha PNG; a palette PNG decodes to its RGB or RGBA colours) and drops the
alpha, keeping the colours as stored: the rule of the trainers, whose decoder
(`tf.io.decode_image(channels=3)`) drops it the same way, and of
tools/make_tfrecords.py, which writes such images as they are and counts them
(data/image_checks.py; docs/data.md, docs/deployment.md).

Bad input fails the request with an `InvalidArgumentError` whose message names
the signature, the problem and the batch index.
"""

import numpy as np
import tensorflow as tf

from keras_vit.preprocessing import preprocess_input
from keras_vit_data import image_header, records

LUMA = (0.299, 0.587, 0.114)  # ITU-R BT.601 weights of R, G, B (sum 1)


class ChannelError(ValueError):
    """Pixels whose channel count the model cannot take; the message says where."""


def accepted_channels(channels):
    """The image channel counts that a model of `channels` input channels takes:
    grey or RGB, each with or without alpha, for a grey or RGB model."""
    return (1, 2, 3, 4) if channels in (1, 3) else (channels,)


def _describe(channels):
    return {1: "1 (grayscale)", 2: "2 (grey + alpha)", 3: "3 (RGB)", 4: "4 (RGBA)"}.get(
        channels, str(channels)
    )


def without_alpha(pixels, channels):
    """(..., c) pixels (numpy) -> their colour channels: for a grey or RGB model
    (`channels` 1 or 3), grey + alpha (c = 2) and RGBA (c = 4) lose the alpha; any
    other c, or another model, is returned as it is."""
    pixels = np.asarray(pixels)
    if channels in (1, 3) and pixels.shape[-1] in (2, 4):
        return pixels[..., :-1]
    return pixels


def match_channels(pixels, channels, where="images"):
    """uint8 (N, H, W, c) pixels (numpy) -> (N, H, W, `channels`) as the serving
    signature brings them: grey repeated to RGB, RGB to its luma (rounded back to
    uint8, exact for grey stored as RGB), alpha dropped (`without_alpha`), otherwise
    c must be `channels`. Raises ChannelError naming `where` and both counts."""
    pixels = np.asarray(pixels)
    have = pixels.shape[-1]
    if have == channels:
        return pixels
    if have not in accepted_channels(channels):
        raise ChannelError(
            f"{where}: {have}-channel images; the model takes "
            f"{' or '.join(_describe(c) for c in accepted_channels(channels))}."
        )
    pixels = without_alpha(pixels, channels)
    if pixels.shape[-1] == channels:
        return pixels
    if channels == 3:
        return np.repeat(pixels, 3, axis=-1)
    luma = np.tensordot(pixels.astype(np.float64), np.asarray(LUMA), axes=([-1], [0]))
    return np.clip(np.round(luma), 0, 255).astype(pixels.dtype)[..., None]


def scale_pixels(pixels, preprocessing=None):
    """[0, 255] pixels (any real dtype) -> float32, the model's input:
    `keras_vit.preprocess_input(pixels, preprocessing)` on TensorFlow tensors
    (`preprocessing`: the model's, None for the authors' [-1, 1])."""
    return preprocess_input(tf.cast(pixels, tf.float32), preprocessing)


def assert_not_empty(batch, signature):
    """An op that fails with a clear message when `batch` has no rows."""
    return tf.debugging.Assert(
        tf.shape(batch)[0] > 0, [f"{signature}: empty batch; send at least one image."]
    )


def assert_pixel_shape(pixels, image_size, signature, channels=3):
    """An op that fails unless `pixels` is (B, H, W, C) for `image_size` (H, W) and
    `channels` C. The signature's input spec already says so, but TF Serving and
    a restored signature may pass other shapes through to the graph."""
    expected = tf.constant([*image_size, channels])
    shape = tf.shape(pixels)
    return tf.debugging.Assert(
        tf.logical_and(
            tf.equal(tf.size(shape), 4),
            tf.reduce_all(tf.equal(tf.concat([shape, [0, 0, 0, 0]], 0)[1:4], expected)),
        ),
        [
            f"{signature}: images must be (batch, {image_size[0]}, {image_size[1]}, "
            f"{channels}) pixels; got shape",
            shape,
        ],
        summarize=8,
    )


def assert_pixel_range(pixels, signature):
    """An op that fails unless float `pixels` lie in [0, 255] (catches inputs
    already scaled to [-1, 1])."""
    low, high = tf.reduce_min(pixels), tf.reduce_max(pixels)
    return tf.debugging.Assert(
        tf.logical_and(low >= 0.0, high <= 255.0),
        [f"{signature}: pixel values must be in [0, 255] (unscaled); got min", low, "max", high],
    )


def _has_image_magic(encoded):
    return tf.reduce_any(
        tf.stack(
            [
                tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic)
                for magic in image_header.MAGIC
            ]
        )
    )


def decode_one(
    encoded, index, image_size, signature, channels=3, max_pixels=image_header.DEFAULT_MAX_PIXELS
):
    """One encoded image -> float32 (height, width, `channels`) pixels in [0, 255].

    Fails naming `index` when the bytes are not a JPEG/PNG/GIF/BMP image, when its
    header declares more than `max_pixels` pixels (checked before decoding,
    data/image_header.py), or the image has a channel count the model does not
    take (`accepted_channels`: 1 or 3, with or without alpha, for a grey or RGB
    model, the alpha dropped and brought to its count; else exactly C).
    """
    is_image = tf.debugging.Assert(
        _has_image_magic(encoded),
        [
            f"{signature}: the image at batch index",
            index,
            f"is not a {image_header.FORMATS} image (first bytes:",
            tf.strings.substr(encoded, 0, 8),
            ")",
        ],
    )
    with tf.control_dependencies([is_image]):
        where = tf.strings.join(
            [f"{signature}: the image at batch index ", tf.strings.as_string(index)]
        )
        small_enough = image_header.assert_max_pixels(encoded, max_pixels, where)
    with tf.control_dependencies([small_enough]):
        image = tf.io.decode_image(encoded, channels=0, expand_animations=False)
    have = tf.shape(image)[-1]
    accepted = accepted_channels(channels)
    is_accepted = tf.debugging.Assert(
        tf.reduce_any(tf.equal(have, accepted)),
        [
            f"{signature}: the image at batch index",
            index,
            "has",
            have,
            f"channels; expected {' or '.join(_describe(c) for c in accepted)}",
        ],
    )
    with tf.control_dependencies([is_accepted]):
        image = tf.cast(image, tf.float32)
    if channels in (1, 3):  # the alpha of grey + alpha or RGBA dropped (module docstring)
        image = image[..., : tf.where(tf.equal(have % 2, 0), have - 1, have)]
        have = tf.shape(image)[-1]
    if channels == 3:
        image = tf.tile(image, [1, 1, 3 // have])
    elif channels == 1:
        image = tf.cond(
            tf.equal(have, 3),
            lambda: tf.tensordot(image, tf.constant(LUMA, tf.float32), [[2], [0]])[..., None],
            lambda: image,
        )
    image = tf.ensure_shape(image, [None, None, channels])
    return tf.image.resize(image, image_size)


def decode_images(
    encoded, image_size, signature, channels=3, max_pixels=image_header.DEFAULT_MAX_PIXELS
):
    """A batch of encoded images (B,) tf.string -> float32 (B, H, W, C) pixels
    in [0, 255] at `image_size` (H, W) and `channels` C; fails on an empty batch
    and on an image above `max_pixels` pixels (`decode_one`)."""
    with tf.control_dependencies([assert_not_empty(encoded, signature)]):
        indices = tf.range(tf.shape(encoded)[0])
    return tf.map_fn(
        lambda args: decode_one(args[0], args[1], image_size, signature, channels, max_pixels),
        (encoded, indices),
        fn_output_signature=tf.TensorSpec([*image_size, channels], tf.float32),
    )


def parse_examples(serialized, signature):
    """Serialized tf.train.Example (B,) in the trainer's format (data/records.py)
    -> (encoded images (B,), labels (B, L) int64 padded with -1; L = 0 without
    labels). A missing image feature fails naming the feature."""
    with tf.control_dependencies([assert_not_empty(serialized, signature)]):
        serialized = tf.identity(serialized)
    return records.parse_examples(serialized, missing_label=-1)
