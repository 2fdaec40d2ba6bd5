"""Pixel limits before decoding (data/image_header.py): the size each format's header
declares, as TensorFlow's decoder reads it; images above the limit refused by the
serving signatures (naming the batch index, the size and the limit) before they are
decoded, skipped and counted by tools/make_tfrecords.py, and treated as records that
do not decode by the input pipeline."""

import json
import os
import resource
import struct
import zlib

import export_testing as et
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit_data import image_header, records
from keras_vit_deploy import serving

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)

HUGE = 12_000  # a HUGE x HUGE image: 144 megapixels, above the default 40


# -- images made by hand --------------------------------------------------------------


def grey_png(height, width):
    """A valid PNG of height x width black grey pixels; 12,000 x 12,000 take 140 KB."""

    def chunk(kind, body):
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    compress = zlib.compressobj(9)
    row = b"\0" * (width + 1)  # filter type 0, then the row
    data = b"".join(compress.compress(row) for _ in range(height)) + compress.flush()
    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)  # 8-bit grey
    return image_header.PNG + chunk(b"IHDR", header) + chunk(b"IDAT", data) + chunk(b"IEND", b"")


@pytest.fixture(scope="module")
def huge_png():
    return grey_png(HUGE, HUGE)


def jpeg_declaring(height, width):
    """A real 8x8 JPEG whose frame header (SOF0) declares height x width."""
    jpeg = bytearray(tf.io.encode_jpeg(np.zeros((8, 8, 3), np.uint8)).numpy())
    sof = jpeg.index(b"\xff\xc0")
    jpeg[sof + 5 : sof + 9] = struct.pack(">HH", height, width)
    return bytes(jpeg)


def _lzw_literals(indices, min_code_size=2):
    """GIF image data for colour `indices`: each a literal code, a clear code before
    every second one, so that every code keeps min_code_size + 1 bits."""
    clear, end = 1 << min_code_size, (1 << min_code_size) + 1
    codes = [
        c for i, index in enumerate(indices) for c in ([clear] if i % 2 == 0 else []) + [index]
    ]
    bits = sum(code << (i * (min_code_size + 1)) for i, code in enumerate([*codes, end]))
    data = bits.to_bytes(-(-(len(codes) + 1) * (min_code_size + 1) // 8), "little")
    blocks = b"".join(
        bytes([len(data[i : i + 255])]) + data[i : i + 255] for i in range(0, len(data), 255)
    )
    return bytes([min_code_size]) + blocks + b"\x00"


GIF_COLOURS = bytes([0, 0, 0, 255, 255, 255, 255, 0, 0, 0, 255, 0])  # 4 colours


def gif(screen, frames, extension=True):
    """A GIF89a of logical screen `screen` (height, width), a global 4-colour table and
    `frames` [(height, width, colour indices)], each after a graphic control extension."""
    out = b"GIF89a" + struct.pack("<HHBBB", screen[1], screen[0], 0x81, 0, 0) + GIF_COLOURS
    for height, width, indices in frames:
        if extension:
            out += b"\x21\xf9\x04\x00\x00\x00\x00\x00"
        out += b"\x2c" + struct.pack("<HHHHB", 0, 0, width, height, 0) + _lzw_literals(indices)
    return out + b"\x3b"


def bmp(pixels, top_down=False):
    """An uncompressed 24-bit BMP of uint8 (H, W, 3) `pixels`."""
    height, width, _ = pixels.shape
    stride = (3 * width + 3) // 4 * 4
    rows = pixels[:, :, ::-1] if top_down else pixels[::-1, :, ::-1]  # BGR, bottom-up
    data = b"".join(row.tobytes() + b"\0" * (stride - 3 * width) for row in rows)
    header = b"BM" + struct.pack("<IHHI", 54 + len(data), 0, 0, 54)
    info = struct.pack(
        "<IiiHHIIiiII", 40, width, -height if top_down else height, 1, 24, 0, len(data), 0, 0, 0, 0
    )
    return header + info + data


def size_of(encoded):
    return tuple(int(v) for v in image_header.count_pixels(encoded))


# -- the header --------------------------------------------------------------------------


def test_png_jpeg_and_bmp_headers_give_the_decoded_size():
    rng = np.random.default_rng(0)
    for height, width, channels in ((5, 7, 3), (9, 4, 1), (1, 13, 3)):
        pixels = rng.integers(0, 256, (height, width, channels), np.uint8)
        for encoded in (
            tf.io.encode_png(pixels).numpy(),
            tf.io.encode_jpeg(pixels).numpy(),
            *(bmp(np.repeat(pixels, 3 // channels, -1), top_down) for top_down in (False, True)),
        ):
            assert tf.io.decode_image(encoded).shape[:2] == (height, width)
            assert size_of(encoded) == (height, width, height * width)
    small = grey_png(3, 2)
    assert tf.io.decode_image(small).shape == (3, 2, 1) and size_of(small) == (3, 2, 6)
    assert size_of(grey_png(HUGE, 5)) == (HUGE, 5, 5 * HUGE)
    assert size_of(jpeg_declaring(HUGE, 7)) == (HUGE, 7, 7 * HUGE)


def test_gif_size_is_that_of_its_frames_not_its_screen():
    one = gif((2, 2), [(3, 2, [0, 1, 2, 3, 1, 0])], extension=False)
    decoded = tf.io.decode_image(one).numpy()[0, ..., 0]
    np.testing.assert_array_equal(decoded, [[0, 255], [255, 0], [255, 0]])  # made right
    assert size_of(one) == (3, 2, 6)
    # TensorFlow decodes the largest frame, whatever the screen says, and every frame.
    two = gif((1, 1), [(2, 2, [1] * 4), (30, 20, [1] * 600)])
    assert tf.io.decode_image(two, expand_animations=False).shape == (30, 20, 3)
    assert size_of(two) == (30, 20, 604)
    wide_and_tall = gif((1, 1), [(1, 40, [1] * 40), (30, 1, [1] * 30)])
    assert tf.io.decode_image(wide_and_tall, expand_animations=False).shape == (30, 40, 3)
    assert size_of(wide_and_tall) == (30, 40, 1200)  # the canvas: more than the frames


def test_unknown_formats_and_headers_that_say_nothing_give_minus_one(monkeypatch):
    png = tf.io.encode_png(np.zeros((4, 4, 3), np.uint8)).numpy()
    for encoded in (b"", b"junk", png[:10], png[:12] + b"IEND" + png[16:], b"RIFF\0\0\0\0WEBPVP8 "):
        assert size_of(encoded) == (-1, -1, -1), encoded
    # A GIF walk longer than GIF_MAX_BLOCKS steps stops: size unknown.
    # Steps: per frame its extension and descriptor, each with one sub-block; the trailer.
    frames = [(2, 2, [1] * 4)] * 4
    monkeypatch.setattr(image_header, "GIF_MAX_BLOCKS", 10)

    def walk(encoded):  # eagerly: the loop in Python, under the patched budget
        return [int(v) for v in image_header.image_size(tf.constant(encoded))]

    assert walk(gif((2, 2), frames[:2])) == [2, 2, 8]
    assert walk(gif((2, 2), frames)) == [-1, -1, -1]


# -- the serving signatures --------------------------------------------------------------


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A tiny grey classifier (16 x 16) exported with the default limit."""
    directory = str(tmp_path_factory.mktemp("pixel_limit") / "saved_model")
    serving.export_saved_model(et.output_case_model("softmax_grey"), directory)
    return directory, tf.saved_model.load(directory)


def test_the_limit_is_recorded_in_the_saved_model(exported):
    directory, _ = exported
    assert serving.read_metadata(directory)["max_pixels"] == image_header.DEFAULT_MAX_PIXELS
    with open(os.path.join(directory, serving.METADATA)) as f:
        assert json.load(f)["signatures"] == list(serving.signature_names("classifier"))
    with pytest.raises(ValueError, match="max_pixels=0: expected a positive number"):
        serving.SignatureFunctions(et.output_case_model("softmax_grey"), max_pixels=0)


@pytest.mark.parametrize("kind", ["png", "jpeg"])
def test_signatures_refuse_an_image_above_the_limit_before_decoding_it(exported, huge_png, kind):
    _, loaded = exported
    huge = huge_png if kind == "png" else jpeg_declaring(HUGE, HUGE)
    small = tf.io.encode_png(np.zeros((16, 16, 1), np.uint8)).numpy()
    limit = image_header.DEFAULT_MAX_PIXELS
    requests = {
        "serving_default": lambda *images: {"images": list(images)},
        "predict_examples": lambda *images: {
            "examples": [records.serialize_example(image, [0]) for image in images]
        },
    }
    for name, request in requests.items():  # within the limit, they serve
        outputs = loaded.signatures[name](**{k: tf.constant(v) for k, v in request(small).items()})
        assert outputs["probabilities"].shape == (1, 5)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    for name, request in requests.items():
        inputs = request(small, huge)
        message = (
            f"{name}: the image at batch index 1 has {HUGE * HUGE} pixels "
            f"\\({HUGE} x {HUGE}\\), more than the limit of {limit} pixels"
        )
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            loaded.signatures[name](**{k: tf.constant(v) for k, v in inputs.items()})
    # Decoding would have taken HUGE**2 bytes (144 MB) at least, float32 four times that.
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert grown < HUGE * HUGE / 4, grown


# -- conversion and training data --------------------------------------------------------


def test_make_tfrecords_skips_and_counts_images_above_the_limit(tmp_path, caplog, huge_png):
    from keras_vit_data import writer

    image = np.zeros((6, 5), np.uint8)
    examples = [(image, 0), (huge_png, 1, "huge.png"), (image, 1)]
    manifest = writer.make_tfrecords(
        ({"train": (3, examples)}, ["a", "b"], False), str(tmp_path / "a"), progress=False
    )
    split = manifest["splits"]["train"]
    assert (
        split["count"] == 2 and split["skipped"] == 1 and split["skipped_examples"] == ["huge.png"]
    )
    assert manifest["max_pixels"] == image_header.DEFAULT_MAX_PIXELS
    assert (
        f"skipping huge.png: {HUGE} x {HUGE} = {HUGE * HUGE} pixels, more than --max_pixels"
        in caplog.text
    )
    # A lower limit: the 6 x 5 images go too, named by their position in the split.
    with pytest.raises(
        records.DataError, match=r"train example 0: 6 x 5 = 30 pixels, more than --max_pixels=29"
    ):
        writer.make_tfrecords(
            ({"train": (1, examples[:1])}, ["a", "b"], False),
            str(tmp_path / "b"),
            progress=False,
            strict=True,
            max_pixels=29,
        )


def test_the_input_pipeline_treats_an_image_above_the_limit_as_undecodable(tmp_path, huge_png):
    from dataclasses import replace

    from keras_vit_trainers import input_pipeline

    shard = records.shard_name("train", 0, 1)
    small = tf.io.encode_png(np.full((4, 4, 3), 9, np.uint8)).numpy()
    with tf.io.TFRecordWriter(str(tmp_path / shard)) as writer:
        for i, encoded in enumerate([small, huge_png, small]):
            writer.write(records.serialize_example(encoded, [i]))
    records.write_manifest(
        str(tmp_path),
        {
            "num_classes": 3,
            "splits": {"train": {"count": 3, "shards": [{"file": shard, "count": 3}]}},
        },
    )
    from keras_vit_trainers.input_spec import InputSpec

    spec = InputSpec(image_size=4, num_classes=3)
    kw = dict(split="train", batch_size=3)
    _, labels, weights = next(iter(input_pipeline.eval_dataset(str(tmp_path), spec, **kw)))
    np.testing.assert_array_equal(weights, [1, 0, 1])
    np.testing.assert_array_equal(labels.numpy()[[0, 2]], [0, 2])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="input pipeline: an image has 144000000"
    ):
        list(input_pipeline.eval_dataset(str(tmp_path), replace(spec, strict=True), **kw))
