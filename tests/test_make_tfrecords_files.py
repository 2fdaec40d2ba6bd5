"""One rule for a class folder's files (tools/make_tfrecords.py, data/): every file of
a 3-class folder of 32-px images, as real folders hold them, is written or skipped and
counted by reason (not an image, undecodable, truncated, too large) in the summary
line and the manifest; BMP and GIF are written as the serving signatures take them;
RGBA and palette PNGs are written as they are and counted, and their alpha is dropped
alike by the trainers' decoder and the serving signatures; the holdout's per-class
counts are those of the images written; no TensorFlow line leaks."""

import json
import struct
import zlib

import numpy as np
import pytest
import tensorflow as tf
from test_make_tfrecords import run_main
from test_pixel_limit import bmp, gif

from keras_vit_data import image_checks, image_header
from keras_vit_deploy import preprocessing

SIZE = 32
CLASSES = ("apple", "banana", "cherry")
MAX_PIXELS = 2000  # above 32 x 32, below the 64 x 64 image


def _png_chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def palette_png(indices, colours, alpha):
    """A palette PNG (colour type 3) of uint8 (H, W) `indices` into `colours` (K, 3),
    transparent per colour by `alpha` (K,) (a tRNS chunk)."""
    height, width = indices.shape
    rows = b"".join(b"\0" + row.tobytes() for row in indices.astype(np.uint8))
    return b"".join(
        (
            image_header.PNG,
            _png_chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 3, 0, 0, 0)),
            _png_chunk(b"PLTE", np.asarray(colours, np.uint8).tobytes()),
            _png_chunk(b"tRNS", np.asarray(alpha, np.uint8).tobytes()),
            _png_chunk(b"IDAT", zlib.compress(rows)),
            _png_chunk(b"IEND", b""),
        )
    )


def broken_png():
    """A whole PNG (IHDR of 32 x 32 RGB, IEND) whose image data is not zlib's."""
    header = struct.pack(">IIBBBBB", SIZE, SIZE, 8, 2, 0, 0, 0)
    return b"".join(
        (
            image_header.PNG,
            _png_chunk(b"IHDR", header),
            _png_chunk(b"IDAT", b"not zlib data"),
            _png_chunk(b"IEND", b""),
        )
    )


def _image(seed, size=SIZE):
    return np.random.default_rng(seed).integers(0, 256, (size, size, 3), np.uint8)


@pytest.fixture(scope="module")
def alpha_images():
    """(RGBA PNG, palette PNG with transparency) of 32 x 32."""
    rgba = np.concatenate([_image(1), _image(2)[..., :1]], -1)
    indices = np.arange(SIZE * SIZE).reshape(SIZE, SIZE) % 4
    colours = [[255, 0, 0], [0, 255, 0], [0, 0, 255], [9, 9, 9]]
    return tf.io.encode_png(rgba).numpy(), palette_png(indices, colours, [0, 128, 255, 40])


@pytest.fixture(scope="module")
def folder(tmp_path_factory, alpha_images):
    """ROOT/{apple,banana,cherry}/: 3 good images each, and one of each kind of file a
    real folder holds; returns (root, {file name: what becomes of it})."""
    root = tmp_path_factory.mktemp("fruit")
    fates = {}
    jpeg = tf.io.encode_jpeg(_image(7)).numpy()
    extra = {
        "apple": {
            "rgba.png": (alpha_images[0], "written"),
            "palette.png": (alpha_images[1], "written"),
            "notes.txt": (b"picked in May\n", "not_an_image"),
        },
        "banana": {
            "cut.jpg": (jpeg[: len(jpeg) // 2], "truncated"),
            "photo.webp": (b"RIFF\x24\0\0\0WEBPVP8 " + bytes(24), "not_an_image"),
            "big.png": (tf.io.encode_png(_image(8, 64)).numpy(), "too_large"),
        },
        "cherry": {
            "scan.bmp": (bmp(_image(9)), "written"),
            "anim.gif": (gif((4, 4), [(4, 4, [0, 1, 2, 3] * 4)]), "written"),
            "broken.png": (broken_png(), "undecodable"),
        },
    }
    for c, name in enumerate(CLASSES):
        (root / name).mkdir()
        for i in range(3):
            encode = tf.io.encode_png if i % 2 else tf.io.encode_jpeg
            (root / name / f"{i}.{'png' if i % 2 else 'jpg'}").write_bytes(
                encode(_image(10 * c + i)).numpy()
            )
            fates[f"{name}/{i}"] = "written"
        for file_name, (content, fate) in extra[name].items():
            (root / name / file_name).write_bytes(content)
            fates[f"{name}/{file_name}"] = fate
    return root, fates


def test_every_file_is_written_or_skipped_by_reason(tmp_path, folder, capfd, caplog):
    root, fates = folder
    out = tmp_path / "data"
    run_main(
        f"--source=folder:{root}",
        f"--output_dir={out}",
        f"--max_pixels={MAX_PIXELS}",
        "--holdout=0.3",
        "--noprogress",
    )
    captured = capfd.readouterr()
    manifest = json.loads((out / "manifest.json").read_text())
    splits = manifest["splits"]
    written = sum(split["count"] for split in splits.values())
    skipped = {}
    for split in splits.values():
        for reason, count in split.get("skipped_by_reason", {}).items():
            skipped[reason] = skipped.get(reason, 0) + count
        assert split.get("skipped", 0) == sum(split.get("skipped_by_reason", {}).values())
    expected = {}
    for fate in fates.values():
        expected[fate] = expected.get(fate, 0) + 1
    assert written == expected.pop("written") and skipped == expected
    assert written + sum(skipped.values()) == len(fates)  # every file accounted for
    # The two alpha PNGs are written, counted, and the line says what became of alpha.
    assert sum(split.get("alpha_dropped", 0) for split in splits.values()) == 2
    summary = next(line for line in captured.out.splitlines() if line.startswith("Wrote "))
    for name, split in splits.items():
        reasons = ", ".join(
            f"{n} {image_checks.REASONS[r]}" for r, n in split.get("skipped_by_reason", {}).items()
        )
        assert f"{name}: {split['count']}" in summary, summary
        if reasons:
            assert f"{split['skipped']} skipped: {reasons}" in summary, summary
        if split.get("alpha_dropped"):
            assert f"{split['alpha_dropped']} with alpha, dropped" in summary, summary
    # The manifest's counts agree with each other: the held-out per-class counts are
    # the images written.
    holdout = manifest["holdout"]
    assert sum(holdout["validation_per_class"]) == splits["validation"]["count"]
    assert sum(holdout["train_per_class"]) == splits["train"]["count"]
    # Our lines only: libjpeg's 'Premature end of JPEG data' never comes (the cut
    # JPEG is found from its bytes, not decoded).
    assert "Premature end" not in captured.err + captured.out
    assert "cut.jpg: truncated" in caplog.text and "notes.txt: not a JPEG" in caplog.text


@pytest.mark.parametrize("channels", [3, 1])
def test_alpha_is_dropped_alike_by_training_and_serving(alpha_images, channels):
    """The trainers' decoder (channels=3) and a serving signature's decode of the same
    RGBA and palette PNGs give the same pixels: the colours as stored, alpha dropped
    (a grey model: their luma)."""
    served = preprocessing.decode_images(
        tf.constant(list(alpha_images)), (SIZE, SIZE), "predict_images", channels
    ).numpy()
    for image, pixels in zip(alpha_images, served):
        trained = tf.io.decode_image(image, channels=3, expand_animations=False).numpy()
        assert (
            tf.io.decode_image(image, channels=0, expand_animations=False).shape[-1] == 4
        )  # both have alpha to drop
        expected = preprocessing.match_channels(trained[None], channels)[0]
        if channels == 3:
            np.testing.assert_array_equal(pixels, expected)
        else:  # the signature's float luma; match_channels rounds it to uint8
            np.testing.assert_allclose(pixels, expected, atol=0.5)
    # numpy's rule (the export reports' comparison images) is the same.
    rgba = tf.io.decode_image(alpha_images[0], channels=0).numpy()
    np.testing.assert_array_equal(preprocessing.without_alpha(rgba, 3), rgba[..., :3])
    assert preprocessing.without_alpha(rgba, 4) is not None  # a 4-channel model keeps all
    assert preprocessing.without_alpha(rgba, 4).shape[-1] == 4
