"""The size of an encoded image read from its header, before decoding it, so that an
image too large to decode safely is refused first (`assert_max_pixels`): a 140 KB PNG
can declare 12,000 x 12,000 pixels, which decoding then allocates.

What each format says, read as TensorFlow's decoders read it:

- PNG: the IHDR chunk, the first after the 8-byte signature: width and height as
  big-endian uint32 at bytes 16 and 20.
- JPEG: the frame header (SOFn), through `tf.image.extract_jpeg_shape`.
- BMP: width and height as little-endian int32 at bytes 18 and 22 (a negative height
  is a top-down image).
- GIF: TensorFlow decodes every frame (each one's pixels, then a canvas as large as
  the largest frame), whatever the logical screen at bytes 6-9 says, so the image
  descriptors of all frames are read, walking the GIF blocks (a loop over its blocks,
  about one step per 255 bytes of image data).

`image_size` gives (height, width, pixels): for a GIF the largest frame's height
and width and the larger of all frames' pixels and the canvas' (what decoding
allocates); -1 each for bytes that are none of these formats or a header that says
nothing (a PNG without IHDR, a negative width). Graph ops (tf.data, serving
signatures); `count_pixels` runs it eagerly. TensorFlow is imported by the functions
that build these ops, not with the module: its constants (`DEFAULT_MAX_PIXELS`,
`PNG`) serve a writer that imports no TensorFlow (data/tfrecord_file.py says why).
"""

import functools

DEFAULT_MAX_PIXELS = 40_000_000  # 40 megapixels: the default limit of serving and data

PNG = b"\x89PNG\r\n\x1a\n"
JPEG = b"\xff\xd8\xff"
GIF = (b"GIF87a", b"GIF89a")
BMP = b"BM"
MAGIC = (PNG, JPEG, *GIF, BMP)  # the leading bytes of the formats read here
FORMATS = "JPEG, PNG, GIF or BMP"

# Steps (blocks and sub-blocks, mostly of 255 bytes) a GIF's walk may take: about 5 MB
# of image data, bounding the time spent on a GIF of tiny sub-blocks.
GIF_MAX_BLOCKS = 20_000
_HEAD = 32  # bytes of the header the fixed-offset formats are read from
_UNKNOWN = (-1, -1, -1)


def _starts_with(encoded, magic):
    import tensorflow as tf

    return tf.equal(tf.strings.substr(encoded, 0, len(magic)), magic)


def _number(head, offset, dtype, little_endian):
    """The integer of `dtype` at byte `offset` of `head` (at least offset + size bytes)."""
    import tensorflow as tf

    raw = tf.strings.substr(head, offset, tf.dtypes.as_dtype(dtype).size)
    return tf.cast(tf.io.decode_raw(raw, dtype, little_endian=little_endian)[0], tf.int64)


def _size(height, width, valid=True):
    """(height, width, pixels) int64, or -1 each unless `valid` and both are >= 0."""
    import tensorflow as tf

    ok = tf.logical_and(valid, tf.logical_and(height >= 0, width >= 0))
    values = tf.stack([height, width, height * width])
    return tf.unstack(tf.where(ok, values, tf.constant(_UNKNOWN, tf.int64)))


def _png(head):
    import tensorflow as tf

    is_ihdr = tf.equal(tf.strings.substr(head, 12, 4), b"IHDR")
    width = _number(head, 16, tf.int32, little_endian=False)  # a uint32 above 2**31 - 1
    height = _number(head, 20, tf.int32, little_endian=False)  # is invalid PNG: negative
    return _size(height, width, is_ihdr)


def _jpeg(encoded):
    import tensorflow as tf

    shape = tf.cast(tf.image.extract_jpeg_shape(encoded), tf.int64)
    return _size(shape[0], shape[1])


def _bmp(head):
    import tensorflow as tf

    width = _number(head, 18, tf.int32, little_endian=True)
    height = tf.abs(_number(head, 22, tf.int32, little_endian=True))
    return _size(height, width)


def _gif(encoded):
    """Walks the blocks after the logical screen (and global colour table): an image
    descriptor (0x2C) holds its frame's width and height (little-endian uint16 at +5,
    +7) and is followed by data sub-blocks; an extension (0x21) by sub-blocks; the
    trailer (0x3B), anything else or the end of the bytes ends the walk. A walk
    longer than GIF_MAX_BLOCKS steps stops there: size unknown (-1)."""
    import tensorflow as tf

    data = tf.cast(tf.io.decode_raw(encoded, tf.uint8), tf.int64)
    n = tf.size(data, out_type=tf.int64)
    # Zeros after the end: a step starts before byte n and moves at most 1 + 255 (a
    # sub-block) or 11 + 768 (a descriptor and its colour table) bytes.
    data = tf.concat([data, tf.zeros([1024], tf.int64)], 0)

    def colour_table(flags):  # the bytes of the colour table a packed-flags byte announces
        return tf.where(
            flags >= 128, 3 * tf.bitwise.left_shift(tf.constant(2, tf.int64), flags % 8), 0
        )

    def skip_sub_blocks(pos, steps):  # each: its size (1 byte), then as many bytes; 0 ends
        pos, steps = tf.while_loop(
            lambda p, k: tf.logical_and(
                tf.logical_and(p < n, k < GIF_MAX_BLOCKS), tf.not_equal(data[p], 0)
            ),
            lambda p, k: (p + 1 + data[p], k + 1),
            (pos, steps),
        )
        return pos + 1, steps

    def block(pos, steps, done, total, widest, tallest):
        kind = data[pos]
        is_image, is_extension = tf.equal(kind, 0x2C), tf.equal(kind, 0x21)
        width = tf.where(is_image, data[pos + 5] + 256 * data[pos + 6], 0)
        height = tf.where(is_image, data[pos + 7] + 256 * data[pos + 8], 0)
        blocks = tf.where(is_image, pos + 11 + colour_table(data[pos + 9]), pos + 2)
        return (
            *skip_sub_blocks(blocks, steps + 1),
            tf.logical_not(tf.logical_or(is_image, is_extension)),
            total + width * height,
            tf.maximum(widest, width),
            tf.maximum(tallest, height),
        )

    zero = tf.constant(0, tf.int64)
    _, steps, _, total, widest, tallest = tf.while_loop(
        lambda pos, steps, done, *_: tf.logical_and(
            tf.logical_not(done), tf.logical_and(pos < n, steps < GIF_MAX_BLOCKS)
        ),
        block,
        (13 + colour_table(data[10]), zero, tf.constant(False), zero, zero, zero),
    )
    return _size(tallest, widest, steps < GIF_MAX_BLOCKS)[:2] + [
        tf.where(steps < GIF_MAX_BLOCKS, tf.maximum(total, widest * tallest), -1)
    ]


def image_size(encoded):
    """An encoded image (scalar tf.string) -> (height, width, pixels) int64 scalars
    from its header (see the module docstring); -1 each where the header says nothing."""
    import tensorflow as tf

    head = tf.strings.join([tf.strings.substr(encoded, 0, _HEAD), b"\0" * _HEAD])
    formats = [tf.logical_or(*map(_starts_with, [encoded] * 2, GIF))]
    formats += [_starts_with(encoded, magic) for magic in (PNG, JPEG, BMP)]
    branch = tf.argmax(tf.cast(tf.stack([*formats, tf.constant(True)]), tf.int32))
    return tf.switch_case(
        tf.cast(branch, tf.int32),
        [
            lambda: _gif(encoded),
            lambda: _png(head),
            lambda: _jpeg(encoded),
            lambda: _bmp(head),
            lambda: [tf.constant(v, tf.int64) for v in _UNKNOWN],
        ],
    )


@functools.cache
def _count_pixels():
    import tensorflow as tf

    return tf.function(image_size, input_signature=[tf.TensorSpec([], tf.string)], autograph=False)


def count_pixels(encoded):
    """`image_size` traced once per process: a graph for eager callers
    (tools/make_tfrecords.py), and a function the graphs of `assert_max_pixels` call
    (each tf.data pipeline or signature would otherwise trace its own copy)."""
    return _count_pixels()(encoded)


def assert_max_pixels(encoded, max_pixels, where):
    """An op that fails (InvalidArgumentError) unless the header of `encoded` gives its
    size and that size is at most `max_pixels` pixels; the message starts with
    `where` (a scalar string naming the image, e.g. 'predict: the image at batch
    index 3') and says the size and the limit."""
    import tensorflow as tf

    height, width, pixels = count_pixels(encoded)
    readable = tf.debugging.Assert(
        pixels >= 0,
        [tf.strings.join([where, f" is not a {FORMATS} image whose header gives its size"])],
    )
    size = tf.strings.format(
        " has {} pixels ({} x {}), more than the limit of {} pixels",
        [pixels, height, width, tf.constant(max_pixels, tf.int64)],
    )
    with tf.control_dependencies([readable]):
        return tf.debugging.Assert(pixels <= max_pixels, [tf.strings.join([where, size])])
