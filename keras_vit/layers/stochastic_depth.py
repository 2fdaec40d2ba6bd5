"""Stochastic depth (Huang et al., 2016): drop a residual branch per example.

Used by the AugReg recipe ("How to train your ViT", Steiner et al., 2021) and DeiT to
regularise ViTs trained on mid-size data; the published checkpoints were trained without
it, and at inference it is the identity, so their logits are unchanged.
"""

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
class StochasticDepth(keras.layers.Layer):
    """In training, zeroes the whole branch of each example with probability `rate`
    and scales the kept ones by 1 / (1 - rate) (so the expectation is unchanged); the
    identity at inference and for rate 0.

    Input shape: (batch, ...) (a residual branch, e.g. (batch, tokens, hidden)).
    Output shape: the same.

    Args:
        rate: drop probability in [0, 1).
        seed: optional int seed of the layer's random stream.
    """

    def __init__(self, rate=0.0, seed=None, **kwargs):
        super().__init__(**kwargs)
        rate = float(rate)
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"{self.name}: stochastic depth rate must be in [0, 1), got {rate}.")
        self.rate = rate
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed) if rate > 0 else None

    def call(self, x, training=None):
        if not training or self.rate == 0.0:
            return x
        keep = 1.0 - self.rate
        shape = (keras.ops.shape(x)[0],) + (1,) * (len(x.shape) - 1)
        mask = keras.random.uniform(shape, seed=self.seed_generator, dtype=x.dtype) < keep
        return x * keras.ops.cast(mask, x.dtype) / keras.ops.cast(keep, x.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"rate": self.rate, "seed": self.seed})
        return config


def linear_rates(rate, num_layers):
    """Per-block rates rising linearly from 0 (first block) to `rate` (last), as DeiT
    and AugReg schedule them: [rate * i / (num_layers - 1) for i in range(num_layers)]."""
    if num_layers <= 1:
        return [float(rate)] * num_layers
    return [float(rate) * i / (num_layers - 1) for i in range(num_layers)]
