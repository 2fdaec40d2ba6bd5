"""The fused (`keras.ops.dot_product_attention`) and explicit softmax paths of
MultiHeadSelfAttention compute the same function.

Small random layers, float32 and mixed_bfloat16, on the current backend; the
tolerances are the same on every backend.
"""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers.attention import MultiHeadSelfAttention

# float32: both paths do the same products in a different order; ~1e-7 apart.
FLOAT32_ATOL = 1e-5
# mixed_bfloat16: q, k, v, the attention weights and the context are rounded to
# bfloat16 (unit roundoff u = 2**-8) at points that differ between the paths
# (e.g. the explicit path scales q before its product, the fused one the logits).
# Five such roundings, each amplified by at most ~1 through softmax and the
# projections, bound the difference by about 8u of the output's scale: 2**-5 of
# max|output| (seen: up to 2.0% fused vs explicit, 2.2% vs float64).
BFLOAT16_SCALED_ATOL = 8 * 2.0**-8


def _layer_pair(dtype, hidden=32, heads=4, seed=0, pad_tokens_to_multiple=None):
    """Two attention layers with the same random weights, fused and explicit."""
    fused = MultiHeadSelfAttention(
        heads, dtype=dtype, name="fused", pad_tokens_to_multiple=pad_tokens_to_multiple
    )
    explicit = MultiHeadSelfAttention(
        heads, use_fused_attention=False, dtype=dtype, name="explicit"
    )
    for layer in (fused, explicit):
        layer.build((None, None, hidden))
    rng = np.random.default_rng(seed)
    weights = [rng.normal(0, 0.3, w.shape).astype("float32") for w in fused.weights]
    fused.set_weights(weights)
    explicit.set_weights(weights)
    return fused, explicit


def _tokens(batch=2, tokens=17, hidden=32, seed=1):
    return np.random.default_rng(seed).normal(size=(batch, tokens, hidden)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(keras.ops.cast(x, "float32"))


def _reference_attention(layer, x):
    """float64 numpy attention with `layer`'s weights: output (B, N, D)."""
    q, k, v = (
        np.einsum("bnd,dhk->bhnk", x, _numpy(w).astype("float64"))
        + _numpy(b).astype("float64")[None, :, None, :]
        for w, b in (
            (layer.query_kernel, layer.query_bias),
            (layer.key_kernel, layer.key_bias),
            (layer.value_kernel, layer.value_bias),
        )
    )
    logits = np.einsum("bhqk,bhsk->bhqs", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhqs,bhsk->bqhk", weights, v)
    return np.einsum("bqhk,hkd->bqd", context, _numpy(layer.out_kernel).astype("float64")) + _numpy(
        layer.out_bias
    ).astype("float64")


@pytest.mark.parametrize("tokens", [17, 197 // 4])
def test_fused_equals_explicit_float32(tokens):
    fused, explicit = _layer_pair("float32")
    x = _tokens(tokens=tokens)
    out_fused = _numpy(fused(x))
    out_explicit = _numpy(explicit(x))
    np.testing.assert_allclose(out_fused, out_explicit, rtol=0, atol=FLOAT32_ATOL)
    # Both are the attention function, not merely equal to each other.
    np.testing.assert_allclose(out_fused, _reference_attention(fused, x), rtol=0, atol=FLOAT32_ATOL)


def test_fused_path_is_taken_unless_weights_are_requested(monkeypatch):
    """Asking for the weights must use the explicit path, else the fused one."""
    fused, _ = _layer_pair("float32")
    calls = []
    original = keras.ops.dot_product_attention
    monkeypatch.setattr(
        keras.ops, "dot_product_attention", lambda *a, **k: calls.append(1) or original(*a, **k)
    )
    x = _tokens()
    fused(x)
    assert len(calls) == 1
    out, weights = fused(x, return_attention_weights=True)
    assert len(calls) == 1
    assert tuple(weights.shape) == (2, 4, 17, 17)
    np.testing.assert_allclose(_numpy(out), _numpy(fused(x)), rtol=0, atol=FLOAT32_ATOL)


def test_fused_equals_explicit_mixed_bfloat16():
    fused, explicit = _layer_pair("mixed_bfloat16")
    x = _tokens()
    out_fused = fused(x)
    out_explicit, weights = explicit(x, return_attention_weights=True)
    for out in (out_fused, out_explicit, weights):
        assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    reference = _reference_attention(fused, x)
    atol = BFLOAT16_SCALED_ATOL * np.abs(reference).max()
    np.testing.assert_allclose(_numpy(out_fused), _numpy(out_explicit), rtol=0, atol=atol)
    # Each is float64 attention with the same weights, up to bfloat16 rounding.
    for out in (out_fused, out_explicit):
        np.testing.assert_allclose(_numpy(out), reference, rtol=0, atol=atol)
    np.testing.assert_allclose(_numpy(weights).sum(-1), 1.0, atol=4 * 2.0**-8)


def test_whole_model_fused_equals_explicit():
    """A tiny ViT with every block on the explicit path gives the same logits."""
    kwargs = dict(
        image_size=32,
        patch_size=8,
        hidden_size=32,
        mlp_dim=64,
        num_heads=4,
        num_layers=2,
        num_classes=5,
    )
    model = keras_vit.VisionTransformer(**kwargs)
    rng = np.random.default_rng(2)
    model.set_weights([rng.normal(0, 0.2, w.shape).astype("float32") for w in model.weights])
    images = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    fused_logits = _numpy(model(images))
    for block in model.get_layer("Transformer").blocks:
        block.attention.use_fused_attention = False
    np.testing.assert_allclose(_numpy(model(images)), fused_logits, rtol=0, atol=FLOAT32_ATOL)


@pytest.mark.parametrize("tokens,multiple", [(17, 8), (197 // 4, 16), (16, 8)])
def test_padded_fused_attention_equals_unpadded(tokens, multiple, monkeypatch):
    """Padding the tokens to a multiple, with the padding keys masked, changes
    nothing in the outputs; the fused op sees the padded length."""
    padded, explicit = _layer_pair("float32", pad_tokens_to_multiple=multiple)
    seen = []
    original = keras.ops.dot_product_attention
    monkeypatch.setattr(
        keras.ops,
        "dot_product_attention",
        lambda q, *a, **k: seen.append(q.shape[1]) or original(q, *a, **k),
    )
    x = _tokens(tokens=tokens)
    out = _numpy(padded(x))
    assert seen == [-(-tokens // multiple) * multiple]
    assert out.shape == (2, tokens, 32)
    np.testing.assert_allclose(out, _numpy(explicit(x)), rtol=0, atol=FLOAT32_ATOL)
    np.testing.assert_allclose(out, _reference_attention(padded, x), rtol=0, atol=FLOAT32_ATOL)


def test_padding_is_kept_in_the_config_and_checked():
    layer = MultiHeadSelfAttention(4, pad_tokens_to_multiple=64)
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    assert clone.pad_tokens_to_multiple == 64
    with pytest.raises(ValueError, match="pad_tokens_to_multiple must be a positive int"):
        MultiHeadSelfAttention(4, pad_tokens_to_multiple=0)
