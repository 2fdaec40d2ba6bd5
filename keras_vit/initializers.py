"""Initialisers of the official ViT that Keras does not have as such."""

import math

import keras


@keras.saving.register_keras_serializable(package="keras_vit")
class FlatGlorotUniform(keras.initializers.GlorotUniform):
    """Xavier/Glorot uniform over a kernel flattened to a 2-D matrix.

    Flax's `DenseGeneral` (used by `MultiHeadDotProductAttention`) initialises a
    kernel of shape (D, heads, head_dim) as if it were the (D, heads*head_dim)
    matrix. Keras' `GlorotUniform` computes fans differently for 3-D kernels, so
    this initialiser flattens first: fan_in = prod(shape[:in_axes]),
    fan_out = prod(shape[in_axes:]); limit = sqrt(6 / (fan_in + fan_out)).

    Args:
        in_axes: how many leading axes are input axes (1 for q/k/v kernels
            (D, H, hd), 2 for the output kernel (H, hd, D)).
        seed: optional seed, as for Keras initialisers.
    """

    def __init__(self, in_axes=1, seed=None):
        super().__init__(seed=seed)
        self.in_axes = int(in_axes)

    def __call__(self, shape, dtype=None):
        flat = (math.prod(shape[: self.in_axes]), math.prod(shape[self.in_axes :]))
        return keras.ops.reshape(super().__call__(flat, dtype=dtype), shape)

    def get_config(self):
        return {**super().get_config(), "in_axes": self.in_axes}


def xavier_uniform():
    """Dense kernels in the MLP block and attention (flattened 2-D semantics)."""
    return keras.initializers.GlorotUniform()


def mlp_bias():
    """MLP biases: normal(stddev=1e-6), as the official `MlpBlock`."""
    return keras.initializers.RandomNormal(stddev=1e-6)


def position_embedding():
    """Position embeddings: normal(stddev=0.02), not truncated."""
    return keras.initializers.RandomNormal(stddev=0.02)
