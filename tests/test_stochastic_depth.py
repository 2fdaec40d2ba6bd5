"""Stochastic depth: per-example branch drop in training, the identity at inference."""

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit import layers
from keras_vit.layers.stochastic_depth import linear_rates


def _np(x):
    return keras.ops.convert_to_numpy(x)


def test_identity_at_inference_and_rate_zero(rng):
    x = rng.standard_normal((8, 5, 4)).astype("float32")
    np.testing.assert_array_equal(_np(layers.StochasticDepth(0.5)(x, training=False)), x)
    np.testing.assert_array_equal(_np(layers.StochasticDepth(0.0)(x, training=True)), x)


def test_drops_whole_examples_at_the_rate(rng):
    rate, n = 0.3, 4000
    x = rng.uniform(1, 2, (n, 3, 2)).astype("float32")
    y = _np(layers.StochasticDepth(rate, seed=1)(x, training=True))
    dropped = np.all(y == 0, axis=(1, 2))
    kept = ~dropped
    # Kept examples are scaled by 1 / (1 - rate), as a whole.
    np.testing.assert_allclose(y[kept], x[kept] / (1 - rate), rtol=1e-6)
    # Binomial(n, rate): the dropped fraction is within 6 standard deviations.
    assert abs(dropped.mean() - rate) < 6 * np.sqrt(rate * (1 - rate) / n)


def test_rejects_bad_rate():
    with pytest.raises(ValueError, match="stochastic depth rate must be in"):
        layers.StochasticDepth(1.0)


def test_encoder_rates_rise_linearly():
    assert linear_rates(0.2, 5) == pytest.approx([0.0, 0.05, 0.1, 0.15, 0.2])
    encoder = layers.Encoder(
        (2, 2), num_layers=3, num_heads=2, mlp_dim=8, num_prefix_tokens=0, stochastic_depth_rate=0.1
    )
    assert [b.stochastic_depth_rate for b in encoder.blocks] == pytest.approx([0, 0.05, 0.1])
    clone = layers.Encoder.from_config(encoder.get_config())
    assert [b.stochastic_depth_rate for b in clone.blocks] == pytest.approx([0, 0.05, 0.1])


def test_block_in_training_keeps_or_drops_each_branch(rng):
    block = layers.EncoderBlock(num_heads=2, mlp_dim=8, stochastic_depth_rate=0.5)
    x = rng.standard_normal((64, 3, 4)).astype("float32")
    block(x)
    y = _np(block(x, training=True))
    # Per example: x, x + 2*attention branch (then MLP on that), ... never a mix
    # inside an example; at inference the full block.
    same = np.all(np.isclose(y, x), axis=(1, 2))
    assert 0 < same.sum() < len(x)  # some examples dropped both branches, not all
    reference = layers.EncoderBlock(num_heads=2, mlp_dim=8)
    reference(x)
    reference.set_weights(block.get_weights())
    np.testing.assert_array_equal(_np(block(x, training=False)), _np(reference(x)))


def test_model_logits_unchanged_at_inference_and_config_round_trip(rng):
    kw = dict(
        image_size=16,
        patch_size=8,
        hidden_size=8,
        mlp_dim=16,
        num_heads=2,
        num_layers=2,
        num_classes=3,
    )
    model = keras_vit.VisionTransformer(**kw, stochastic_depth_rate=0.2)
    plain = keras_vit.VisionTransformer(**kw)
    assert len(model.weights) == len(plain.weights)  # no weights of its own
    weights = [rng.standard_normal(w.shape).astype("float32") for w in plain.weights]
    model.set_weights(weights)
    plain.set_weights(weights)
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(_np(model(x)), _np(plain(x)))
    clone = keras_vit.VisionTransformer.from_config(model.get_config())
    assert clone.stochastic_depth_rate == 0.2
    assert clone.get_layer("Transformer").blocks[1].stochastic_depth_rate == 0.2
