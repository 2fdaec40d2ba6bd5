"""In-graph input handling of the serving signatures: decoding, checking and
scaling images as the trainer's eval pipeline does (trainers/input_pipeline.py:
decode, grayscale -> RGB, bilinear `tf.image.resize`, (x - 127.5) / 127.5).

Bad input fails the request with an `InvalidArgumentError` whose message names
the signature, the problem and the batch index.
"""

import tensorflow as tf

# Leading bytes of the formats tf.io.decode_image reads.
_MAGIC = (b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff", b"GIF87a", b"GIF89a", b"BM")
ENCODED_KEY = "image/encoded"
LABEL_KEY = "image/class/label"


def scale_pixels(pixels):
    """[0, 255] pixels (any real dtype) -> float32 in [-1, 1], the model's input."""
    return tf.cast(pixels, tf.float32) / 127.5 - 1.0


def assert_not_empty(batch, signature):
    """An op that fails with a clear message when `batch` has no rows."""
    return tf.debugging.Assert(
        tf.shape(batch)[0] > 0, [f"{signature}: empty batch; send at least one image."]
    )


def assert_pixel_shape(pixels, image_size, signature):
    """An op that fails unless `pixels` is (B, H, W, 3) for `image_size` (H, W).
    The signature's input spec already says so, but TF Serving and a restored
    signature may pass other shapes through to the graph."""
    expected = tf.constant([*image_size, 3])
    shape = tf.shape(pixels)
    return tf.debugging.Assert(
        tf.logical_and(
            tf.equal(tf.size(shape), 4),
            tf.reduce_all(tf.equal(tf.concat([shape, [0, 0, 0, 0]], 0)[1:4], expected)),
        ),
        [
            f"{signature}: images must be (batch, {image_size[0]}, {image_size[1]}, 3) pixels;"
            " got shape",
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
        tf.stack([tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic) for magic in _MAGIC])
    )


def decode_one(encoded, index, image_size, signature):
    """One encoded image -> float32 (height, width, 3) pixels in [0, 255].

    Fails naming `index` when the bytes are not a JPEG/PNG/GIF/BMP image or the
    image has a channel count other than 1 (grayscale, repeated to RGB) or 3.
    """
    is_image = tf.debugging.Assert(
        _has_image_magic(encoded),
        [
            f"{signature}: the image at batch index",
            index,
            "is not a JPEG, PNG, GIF or BMP image (first bytes:",
            tf.strings.substr(encoded, 0, 8),
            ")",
        ],
    )
    with tf.control_dependencies([is_image]):
        image = tf.io.decode_image(encoded, channels=0, expand_animations=False)
    channels = tf.shape(image)[-1]
    is_rgb = tf.debugging.Assert(
        tf.logical_or(tf.equal(channels, 1), tf.equal(channels, 3)),
        [
            f"{signature}: the image at batch index",
            index,
            "has",
            channels,
            "channels; expected 1 (grayscale) or 3 (RGB)",
        ],
    )
    with tf.control_dependencies([is_rgb]):
        image = tf.tile(image, [1, 1, 3 // channels])
    image = tf.ensure_shape(image, [None, None, 3])
    return tf.image.resize(image, image_size)


def decode_images(encoded, image_size, signature):
    """A batch of encoded images (B,) tf.string -> float32 (B, H, W, 3) pixels
    in [0, 255] at `image_size` (H, W); fails on an empty batch."""
    with tf.control_dependencies([assert_not_empty(encoded, signature)]):
        indices = tf.range(tf.shape(encoded)[0])
    return tf.map_fn(
        lambda args: decode_one(args[0], args[1], image_size, signature),
        (encoded, indices),
        fn_output_signature=tf.TensorSpec([*image_size, 3], tf.float32),
    )


def parse_examples(serialized, signature):
    """Serialized tf.train.Example (B,) in the trainer's format -> (encoded
    images (B,), labels (B, L) int64 padded with -1; L = 0 without labels).
    A missing 'image/encoded' fails naming the feature."""
    with tf.control_dependencies([assert_not_empty(serialized, signature)]):
        serialized = tf.identity(serialized)
    features = tf.io.parse_example(
        serialized,
        {
            ENCODED_KEY: tf.io.FixedLenFeature([], tf.string),
            LABEL_KEY: tf.io.VarLenFeature(tf.int64),
        },
    )
    labels = tf.sparse.to_dense(features[LABEL_KEY], default_value=-1)
    return features[ENCODED_KEY], labels
