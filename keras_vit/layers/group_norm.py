"""Group normalisation as the hybrids' ResNet uses it (Flax `nn.GroupNorm` defaults)."""

import keras

GROUPS = 32
EPSILON = 1e-6


def group_norm(name, zero_scale=False, dtype=None):
    """A `keras.layers.GroupNormalization` with the official settings: 32 groups,
    epsilon 1e-6, per-channel scale and bias.

    Each group's mean and (population) variance are taken over (height, width,
    channels / 32); y = (x - mean) / sqrt(var + 1e-6) * scale + bias, which is
    Flax's `nn.GroupNorm()`.

    Input and output shape: (batch, height, width, channels), channels a
    multiple of 32. Weights: `gamma` (channels,) = the checkpoint's `scale`,
    `beta` (channels,) = its `bias`.

    Args:
        name: the layer name (the checkpoint module name, e.g. 'gn1').
        zero_scale: initialise the scale to zeros (the last norm of a residual
            unit, 'gn3', so that every unit starts as the identity).
        dtype: a dtype policy.
    """
    return keras.layers.GroupNormalization(
        groups=GROUPS,
        epsilon=EPSILON,
        gamma_initializer="zeros" if zero_scale else "ones",
        name=name,
        dtype=dtype,
    )
