"""image_checks.encode_png: PNGs written with zlib (no TensorFlow) that TensorFlow
decodes to the array, whose header gives the array's size; `array_problem`, the check
of an array, says what `image_problem` says of its PNG."""

import numpy as np
import pytest
import tensorflow as tf

from keras_vit_data import image_checks, image_header


@pytest.mark.parametrize("channels", [None, 1, 2, 3, 4])
@pytest.mark.parametrize("size", [(1, 1), (1, 7), (5, 1), (13, 29), (28, 28), (31, 64)])
def test_tensorflow_decodes_the_array(channels, size):
    rng = np.random.default_rng(sum(size) + (channels or 0))
    shape = size if channels is None else (*size, channels)
    array = rng.integers(0, 256, shape, np.uint8)
    png = image_checks.encode_png(array)
    assert png.startswith(image_header.PNG)
    decoded = tf.io.decode_png(png, channels=0).numpy()
    assert decoded.shape == (*size, channels or 1)
    np.testing.assert_array_equal(decoded.reshape(shape), array)
    height, width, pixels = (int(v) for v in image_header.count_pixels(png))
    assert (height, width, pixels) == (size[0], size[1], size[0] * size[1])
    assert image_checks.image_problem(png, max_pixels=size[0] * size[1]) is None
    assert image_checks.array_problem(array, size[0] * size[1]) == (png, None)


def test_smooth_images_compress():
    array = np.tile(np.arange(64, dtype=np.uint8), (64, 1))
    assert len(image_checks.encode_png(array)) < array.size // 4


def test_the_array_check_is_the_png_check():
    array = np.zeros((100, 30, 3), np.uint8)
    png, problem = image_checks.array_problem(array, max_pixels=2999)
    assert problem == "100 x 30 = 3000 pixels, more than --max_pixels=2999"
    assert problem == image_checks.image_problem(png, max_pixels=2999)
    empty = np.zeros((0, 5), np.uint8)
    png, problem = image_checks.array_problem(empty)
    assert problem == "not a decodable image" == image_checks.image_problem(png)


@pytest.mark.parametrize("shape", [(4, 4, 5), (4, 4, 0), (4,), (2, 2, 2, 2)])
def test_other_shapes_are_refused(shape):
    with pytest.raises(ValueError, match=r"expected \(H, W\) or \(H, W, C\), C 1 to 4"):
        image_checks.encode_png(np.zeros(shape, np.uint8))
