"""Layer-specific behaviour, against NumPy where there is a reference. The checks every
layer gets (shapes, config and .keras round trips, dtype policies) are in
tests/test_layer_conformance.py."""

import float_bounds as fb
import keras
import numpy as np
import pytest
import scipy.special

from keras_vit import layers


def test_attention_weights_sum_to_one_and_shape(rng):
    attention = layers.MultiHeadSelfAttention(num_heads=4)
    x = rng.standard_normal((3, 9, 16)).astype("float32")
    out, weights = attention(x, return_attention_weights=True)
    weights = keras.ops.convert_to_numpy(weights)
    assert weights.shape == (3, 4, 9, 9)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert (weights >= 0).all()
    # The same output with and without the weights.
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(attention(x)), keras.ops.convert_to_numpy(out), atol=1e-5
    )


def test_attention_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="not divisible by 3 heads"):
        layers.MultiHeadSelfAttention(num_heads=3)(np.zeros((1, 2, 8), "float32"))


def test_patch_embedding_is_row_major_flatten(rng):
    """Token r*cols + c is patch (r, c): equal to a manual patch projection."""
    layer = layers.PatchEmbedding(patch_size=(2, 3), hidden_size=5)
    x = rng.standard_normal((1, 4, 9, 3)).astype("float32")
    y = keras.ops.convert_to_numpy(layer(x))
    kernel = keras.ops.convert_to_numpy(layer.kernel).reshape(18, 5)
    bias = keras.ops.convert_to_numpy(layer.bias)
    kernel, bias = kernel.astype(np.float64), bias.astype(np.float64)
    for r in range(2):
        for c in range(3):
            patch = x[0, 2 * r : 2 * r + 2, 3 * c : 3 * c + 3].reshape(-1).astype(np.float64)
            # 18 products and the bias: one float32 sum of 19 terms.
            fb.assert_within(
                y[0, r * 3 + c],
                patch @ kernel + bias,
                fb.sum_bound(np.abs(patch) @ np.abs(kernel) + np.abs(bias), 19),
                f"patch ({r}, {c})",
            )


def test_patch_embedding_rejects_non_multiple():
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        layers.PatchEmbedding(patch_size=16, hidden_size=8).grid_size((200, 224))


def test_position_embedding_wrong_length():
    layer = layers.PositionEmbedding(grid_size=(2, 2), num_prefix_tokens=1)
    with pytest.raises(ValueError, match="6 tokens but the embedding covers 5"):
        layer(np.zeros((1, 6, 4), "float32"))


def test_position_embedding_resize_keeps_class_token_and_corners(rng):
    layer = layers.PositionEmbedding(grid_size=(3, 3), num_prefix_tokens=1)
    layer(np.zeros((1, 10, 4), "float32"))
    old = keras.ops.convert_to_numpy(layer.pos_embedding)
    new = layer.resized((5, 7))
    assert new.shape == (1, 1 + 35, 4)
    np.testing.assert_array_equal(new[:, 0], old[:, 0])
    grid_old, grid_new = old[0, 1:].reshape(3, 3, 4), new[0, 1:].reshape(5, 7, 4)
    for (ro, co), (rn, cn) in [
        ((0, 0), (0, 0)),
        ((0, 2), (0, 6)),
        ((2, 0), (4, 0)),
        ((2, 2), (4, 6)),
    ]:
        np.testing.assert_allclose(grid_new[rn, cn], grid_old[ro, co], atol=1e-6)
    # Midpoints are averages of their neighbours (linear interpolation).
    np.testing.assert_allclose(grid_new[2, 0], grid_old[1, 0], atol=1e-6)
    np.testing.assert_allclose(grid_new[1, 0], (grid_old[0, 0] + grid_old[1, 0]) / 2, atol=1e-6)


def test_mlp_uses_tanh_gelu_by_default(rng):
    mlp = layers.MlpBlock(mlp_dim=6)
    x = rng.standard_normal((2, 4)).astype("float32")
    mlp(x)
    k0, b0, k1, b1 = (
        keras.ops.convert_to_numpy(w)
        for w in (mlp.dense_0.kernel, mlp.dense_0.bias, mlp.dense_1.kernel, mlp.dense_1.bias)
    )
    k0, b0, k1, b1 = (w.astype(np.float64) for w in (k0, b0, k1, b1))
    x = x.astype(np.float64)
    h = x @ k0 + b0
    e_h = fb.sum_bound(np.abs(x) @ np.abs(k0) + np.abs(b0), 5)
    z = np.sqrt(2 / np.pi) * (h + 0.044715 * h**3)
    gelu = 0.5 * h * (1 + np.tanh(z))
    # Through GELU: |GELU'| <= 1.13 carries e_h; its own rounding is bounded by that of
    # tanh (a vectorised tanh is within 4 ulp = 8u, plus 4u|z| from z's own roundings,
    # damped by tanh's slope 1 - tanh^2), scaled by 0.5|h|, and a few u of |h| for the
    # polynomial and the products: 0.5|h|(8u + 4u|z|(1 - tanh^2 z)) + 4u|h|.
    e_gelu = (
        1.13 * e_h
        + 0.5 * np.abs(h) * fb.U * (8 + 4 * np.abs(z) * (1 - np.tanh(z) ** 2))
        + 4 * fb.U * np.abs(h)
    )
    expected = gelu @ k1 + b1
    bound = fb.sum_bound(np.abs(gelu) @ np.abs(k1) + np.abs(b1), 7) + e_gelu @ np.abs(k1)
    fb.assert_within(
        keras.ops.convert_to_numpy(mlp(x.astype("float32"))), expected, bound, "MlpBlock"
    )
    # The exact (erf) GELU is another function: its output is far outside the bound.
    erf_gelu = 0.5 * h * (1 + scipy.special.erf(h / np.sqrt(2)))
    assert np.abs(erf_gelu @ k1 + b1 - expected).max() > 10 * bound.max()


def test_layer_norm_epsilon_and_initialisers():
    block = layers.EncoderBlock(num_heads=2, mlp_dim=16)
    block.build((None, 5, 8))
    assert block.norm_1.epsilon == 1e-6 and block.norm_2.epsilon == 1e-6
    assert not np.any(keras.ops.convert_to_numpy(block.attention.query_bias))
    # MLP biases are normal(1e-6): tiny but not zero.
    bias = keras.ops.convert_to_numpy(block.mlp.dense_0.bias)
    assert 0 < np.abs(bias).max() < 1e-5


def test_flattened_xavier_limit():
    from keras_vit.initializers import FlatGlorotUniform

    values = keras.ops.convert_to_numpy(FlatGlorotUniform(in_axes=2)((12, 64, 768)))
    limit = np.sqrt(6 / (768 + 768))
    assert np.abs(values).max() <= limit
    assert np.abs(values).max() > 0.99 * limit
