"""The hybrids' ResNet layers against the independent NumPy reference (numpy_resnet)."""

import float_bounds as fb
import keras
import numpy as np
import numpy_resnet as ref
import pytest

from keras_vit.layers.group_norm import group_norm
from keras_vit.layers.resnet import BottleneckUnit, ResNetStage, ResNetStem
from keras_vit.layers.std_conv import StdConv2D

# Each float32 layer is checked against the float64 reference element by element,
# within the bound that the layer's own computation implies (tests/float_bounds.py):
# no tolerance fitted to one CPU's summation order.


def _np(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("size", [(7, 8), (9, 9), (16, 15)])
@pytest.mark.parametrize("kernel,stride", [(1, 1), (1, 2), (3, 1), (3, 2), (7, 2)])
def test_std_conv_matches_numpy(rng, size, kernel, stride):
    x = rng.standard_normal((2, *size, 5)).astype(np.float32)
    layer = StdConv2D(6, kernel, strides=stride)
    layer.build(x.shape)
    w = (rng.standard_normal(layer.kernel.shape) * 0.3 + 0.2).astype(np.float32)
    layer.kernel.assign(w)
    y = _np(layer(x))
    expected, bound = fb.std_conv(x.astype(np.float64), np.zeros(x.shape), w, stride)
    assert y.shape == expected.shape
    fb.assert_within(y, expected, bound, "StdConv2D")


def test_std_conv_standardises_per_output_channel(rng):
    layer = StdConv2D(4, 3)
    layer.build((1, 5, 5, 3))
    layer.kernel.assign(rng.standard_normal((3, 3, 3, 4)) * 5 + 3)
    w = _np(layer.standardized_kernel())
    np.testing.assert_allclose(w.mean(axis=(0, 1, 2)), 0, atol=1e-6)
    # std + 1e-5 in the denominator (not sqrt(var + 1e-5)): std slightly below 1.
    raw_std = _np(layer.kernel).std(axis=(0, 1, 2))
    np.testing.assert_allclose(w.std(axis=(0, 1, 2)), raw_std / (raw_std + 1e-5), rtol=1e-6)


@pytest.mark.parametrize(
    "size,kernel,stride,expected",
    [
        (7, 7, 2, 4),
        (8, 7, 2, 4),
        (224, 7, 2, 112),
        (225, 7, 2, 113),
        (7, 3, 2, 4),
        (8, 3, 2, 4),
        (7, 1, 2, 4),
        (8, 1, 2, 4),
    ],
)
def test_stride_two_same_shapes(size, kernel, stride, expected):
    layer = StdConv2D(2, kernel, strides=stride)
    assert layer.compute_output_shape((1, size, size + 1, 3))[1:3] == (
        expected,
        -(-(size + 1) // stride),
    )
    y = layer(np.zeros((1, size, size + 1, 3), np.float32))
    assert tuple(y.shape)[1:3] == (expected, -(-(size + 1) // stride))


def test_same_padding_is_tf_style():
    # Even size, stride 2, kernel 3: one padded row, at the bottom (TF/XLA), so
    # output row 0 sees input rows 0..2 (not -1..1).
    assert ref.same_padding(8, 3, 2) == (0, 1)
    assert ref.same_padding(7, 3, 2) == (1, 1)
    assert ref.same_padding(8, 7, 2) == (2, 3)
    layer = StdConv2D(1, (3, 1), strides=(2, 1))
    layer.build((1, 8, 1, 1))
    layer.kernel.assign(np.array([1.0, 0.0, -1.0]).reshape(3, 1, 1, 1))
    x = np.arange(8, dtype=np.float32).reshape(1, 8, 1, 1)
    w = ref.standardize(np.array([1.0, 0.0, -1.0]).reshape(3, 1, 1, 1))[:, 0, 0, 0]
    rows = np.pad(np.arange(8.0), (0, 1))
    expected = [w @ rows[i : i + 3] for i in range(0, 8, 2)]
    np.testing.assert_allclose(_np(layer(x))[0, :, 0, 0], expected, atol=1e-5)


@pytest.mark.parametrize("channels,zero_scale", [(64, False), (96, True)])
def test_group_norm_matches_numpy(rng, channels, zero_scale):
    x = (rng.standard_normal((2, 5, 6, channels)) * 3 + 1).astype(np.float32)
    layer = group_norm("gn", zero_scale=zero_scale)
    layer.build(x.shape)
    assert not np.any(_np(layer.gamma)) == zero_scale
    scale = rng.standard_normal(channels).astype(np.float32)
    bias = rng.standard_normal(channels).astype(np.float32)
    layer.gamma.assign(scale)
    layer.beta.assign(bias)
    expected, bound = fb.group_norm(x.astype(np.float64), np.zeros(x.shape), scale, bias)
    fb.assert_within(_np(layer(x)), expected, bound, "GroupNorm")


def test_group_norm_epsilon_is_1e_6():
    # Groups of small variance (1.9e-5) make epsilon visible: 1.69 with 1e-6,
    # 0.24 with Keras' default 1e-3, 1.73 with none.
    x = np.zeros((1, 2, 2, 32), np.float32)
    x[0, 0, 0, :] = 0.01
    y = _np(group_norm("gn")(x))
    np.testing.assert_allclose(
        y, ref.group_norm(x.astype(np.float64), 1.0, 0.0, eps=1e-6), atol=1e-4
    )
    assert (
        abs(y[0, 0, 0, 0] - ref.group_norm(x.astype(np.float64), 1.0, 0.0, eps=0)[0, 0, 0, 0])
        > 1e-2
    )


def _load_unit(unit, params, prefix):
    for conv, norm in unit.conv_norm_pairs():
        conv.kernel.assign(params[f"{prefix}/{conv.name}/kernel"])
        norm.gamma.assign(params[f"{prefix}/{norm.name}/scale"])
        norm.beta.assign(params[f"{prefix}/{norm.name}/bias"])


@pytest.mark.parametrize(
    "size,stride,in_channels",
    [
        ((9, 8), 2, 64),  # projection and stride 2, odd and even sizes
        ((6, 7), 1, 64),  # projection for the width only
        ((6, 7), 1, 128),
    ],
)  # identity residual
def test_unit_matches_numpy(rng, size, stride, in_channels):
    features = 32
    x = rng.standard_normal((2, *size, in_channels)).astype(np.float32)
    unit = BottleneckUnit(features, strides=stride)
    unit.build(x.shape)
    assert (unit.conv_proj is not None) == (in_channels != 4 * features or stride != 1)
    p = {}
    rng_p = np.random.default_rng(7)
    for conv, norm in unit.conv_norm_pairs():
        p[f"u/{conv.name}/kernel"] = rng_p.standard_normal(conv.kernel.shape).astype(np.float32)
        p[f"u/{norm.name}/scale"] = (1 + 0.3 * rng_p.standard_normal(norm.gamma.shape)).astype(
            np.float32
        )
        p[f"u/{norm.name}/bias"] = (0.2 * rng_p.standard_normal(norm.beta.shape)).astype(np.float32)
    _load_unit(unit, p, "u")
    p64 = {k: v.astype(np.float64) for k, v in p.items()}
    expected = ref.unit(x.astype(np.float64), p64, "u", features, stride)
    value, bound = fb.unit(x.astype(np.float64), np.zeros(x.shape), p64, "u", features, stride)
    np.testing.assert_allclose(value, expected, rtol=1e-12, atol=1e-12)  # the same function
    y = _np(unit(x))
    assert y.shape == expected.shape
    fb.assert_within(y, expected, bound, "BottleneckUnit")


def test_fresh_unit_is_identity_before_relu(rng):
    # gn3's scale starts at zero: a fresh identity unit returns relu(x).
    x = rng.standard_normal((1, 4, 4, 256)).astype(np.float32)
    np.testing.assert_allclose(_np(BottleneckUnit(64)(x)), np.maximum(x, 0), atol=0)


@pytest.mark.parametrize("size", [(32, 32), (37, 36), (33, 31)])
def test_stem_and_stage_match_numpy(rng, size):
    params = ref.random_resnet_params((1, 2), seed=3)
    x = rng.uniform(-1, 1, (2, *size, 3)).astype(np.float32)
    stem = ResNetStem(64)
    stem.build(x.shape)
    stem.conv_root.kernel.assign(params["conv_root/kernel"])
    stem.gn_root.gamma.assign(params["gn_root/scale"])
    stem.gn_root.beta.assign(params["gn_root/bias"])
    stage = ResNetStage(2, 128, first_stride=2, name="block2")
    expected = ref.resnet_forward(params, x, (1, 2), return_stages=True)
    stage.build(expected[1].shape)
    for u, unit in enumerate(stage.units, 1):
        _load_unit(unit, params, f"block2/unit{u}")
    p64 = {k: np.asarray(v, np.float64) for k, v in params.items()}
    y_stem = _np(stem(x))
    assert y_stem.shape == expected[0].shape
    value, bound = fb.stem(x.astype(np.float64), np.zeros(x.shape), p64)
    np.testing.assert_allclose(value, expected[0], rtol=1e-12, atol=1e-12)
    fb.assert_within(y_stem, expected[0], bound, "ResNetStem")
    # block2 on the reference's block1 output (block1 is covered by the unit test).
    block1 = expected[1].astype(np.float32)
    y = _np(stage(block1))
    assert y.shape == expected[2].shape
    value, bound = block1.astype(np.float64), np.zeros(block1.shape)
    for u in range(1, 3):
        value, bound = fb.unit(value, bound, p64, f"block2/unit{u}", 128, 2 if u == 1 else 1)
    fb.assert_within(y, value, bound, "ResNetStage")
