"""Patch embedding (paper Eq. 1): a linear projection of flattened patches."""

import numbers
from collections.abc import Iterable

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Splits an image into P x P patches and projects each to `hidden_size`.

    Implemented as the official code does: a convolution with kernel = stride =
    patch size, 'VALID' padding and a bias, then flattened row-major to tokens.

    Input shape: (batch, height, width, channels), height and width multiples
    of the patch size. They may be None (known only at call time); a size that
    is not a multiple then raises where the shape is static (eager calls, JAX),
    while in a TensorFlow graph of unknown sizes the convolution drops the
    remainder. Output shape: (batch, (height/P) * (width/P), hidden_size); with
    `call(images, return_map=True)` the pair (tokens, patch map), the map
    (batch, height/P, width/P, hidden_size) being the tokens before flattening
    (it carries the grid of a size known only at call time).

    Weights: `kernel` (P, P, channels, hidden_size) (HWIO, the checkpoint's
    layout), `bias` (hidden_size,); no bias with `use_bias=False` (CLIP's patch
    embedding has none). With `norm_epsilon` (a number), a LayerNorm `norm` of
    that epsilon on each token after the projection (timm's embed_norm_layer),
    its gamma and beta (hidden_size,); the patch map is normalised too.
    """

    def __init__(
        self,
        patch_size,
        hidden_size,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        use_bias=True,
        norm_epsilon=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.use_bias = bool(use_bias)
        self.norm_epsilon = None if norm_epsilon is None else float(norm_epsilon)
        self.norm = (
            None
            if norm_epsilon is None
            else keras.layers.LayerNormalization(
                epsilon=self.norm_epsilon, name="norm", dtype=self.dtype_policy
            )
        )
        self.patch_size = to_pair(patch_size, "patch_size")
        self.hidden_size = int(hidden_size)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)

    def build(self, input_shape):
        channels = input_shape[-1]
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.patch_size, channels, self.hidden_size),
            initializer=self.kernel_initializer,
        )
        self.bias = (
            self.add_weight(
                name="bias", shape=(self.hidden_size,), initializer=self.bias_initializer
            )
            if self.use_bias
            else None
        )
        if self.norm is not None:
            self.norm.build((None, None, None, self.hidden_size))

    def grid_size(self, image_size):
        """(rows, cols) of patches for an (height, width) image."""
        height, width = image_size
        ph, pw = self.patch_size
        if height % ph or width % pw:
            raise ValueError(
                f"{self.name}: image size {height}x{width} is not a multiple of the "
                f"patch size {ph}x{pw}."
            )
        return height // ph, width // pw

    def call(self, images, return_map=False):
        height, width = images.shape[1:3]
        if height is not None and width is not None:  # static: checked as in `build`
            self.grid_size((height, width))
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        if self.bias is not None:
            x = x + self.bias
        if self.norm is not None:
            x = self.norm(x)
        shape = ops.shape(x)
        tokens = ops.reshape(x, (-1, shape[1] * shape[2], self.hidden_size))
        return (tokens, x) if return_map else tokens

    def compute_output_shape(self, input_shape):
        batch, rows, cols, hidden = self.map_shape(input_shape)
        return (batch, None if rows is None or cols is None else rows * cols, hidden)

    def map_shape(self, input_shape):
        """The patch map's shape (batch, rows, cols, hidden_size) for images of
        `input_shape` (None for a size known only at call time)."""
        batch, height, width = input_shape[:3]
        rows, cols = self.grid_size((height or self.patch_size[0], width or self.patch_size[1]))
        return (batch, height and rows, width and cols, self.hidden_size)

    def compute_output_spec(self, images, return_map=False):
        tokens = keras.KerasTensor(self.compute_output_shape(images.shape), self.compute_dtype)
        if not return_map:
            return tokens
        return tokens, keras.KerasTensor(self.map_shape(images.shape), self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_size": self.hidden_size,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "use_bias": self.use_bias,
            }
        )
        if self.norm_epsilon is not None:  # absent: no norm (configs written before it)
            config["norm_epsilon"] = self.norm_epsilon
        return config


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTokenMap(keras.layers.Layer):
    """The patch tokens of a sequence laid back on their grid: the inverse of the
    patch embedding's row-major flattening, the prefix tokens (the class token)
    dropped.

    Input: tokens (batch, num_prefix_tokens + rows*cols, hidden) of the grid
    `grid_size`; or the pair `(tokens, patch_map)` for a grid known only at call
    time, the grid then read from the shape of the patch map (batch, rows, cols,
    any) (`PatchEmbedding`'s with `return_map=True`). Output: (batch, rows,
    cols, hidden).

    Args:
        grid_size: (rows, cols), or None where every call passes the patch map.
        num_prefix_tokens: tokens before the grid (1 with a class token, else 0).
    """

    def __init__(self, grid_size=None, num_prefix_tokens=0, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = None if grid_size is None else to_pair(grid_size, "grid_size")
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, inputs):
        if isinstance(inputs, (tuple, list)):
            tokens, patch_map = inputs
            rows, cols = ops.shape(patch_map)[1], ops.shape(patch_map)[2]
        elif self.grid_size is None:
            raise ValueError(
                f"{self.name}: grid_size is None, so the call needs (tokens, patch_map)."
            )
        else:
            tokens, (rows, cols) = inputs, self.grid_size
        return ops.reshape(tokens[:, self.num_prefix_tokens :], (-1, rows, cols, tokens.shape[-1]))

    def compute_output_shape(self, input_shape):
        pair = len(input_shape) == 2 and all(isinstance(s, (tuple, list)) for s in input_shape)
        if pair:
            tokens, patch_map = input_shape
            rows, cols = patch_map[1:3]
        else:
            tokens, (rows, cols) = input_shape, self.grid_size or (None, None)
        return (tokens[0], rows, cols, tokens[-1])

    def compute_output_spec(self, inputs):
        if isinstance(inputs, (tuple, list)):
            tokens, patch_map = inputs
            rows, cols = patch_map.shape[1:3]
        else:
            tokens, (rows, cols) = inputs, self.grid_size or (None, None)
            expected = None if self.grid_size is None else self.num_prefix_tokens + rows * cols
            if expected is not None and tokens.shape[1] not in (None, expected):
                raise ValueError(
                    f"{self.name}: the sequence has {tokens.shape[1]} tokens, not "
                    f"{self.num_prefix_tokens} prefix + {rows}x{cols} grid tokens."
                )
        shape = (tokens.shape[0], rows, cols, tokens.shape[-1])
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update({"grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens})
        return config


def to_pair(value, what="value"):
    """An int or a pair of ints as a (height, width) tuple; a ValueError naming `what`
    for anything else (a float, a string, a sequence of another length)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return (int(value), int(value))
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{what} must be an int or (height, width), got {value!r}.")
    pair = tuple(value)
    if len(pair) != 2 or not all(
        isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in pair
    ):
        raise ValueError(f"{what} must be an int or (height, width), got {value!r}.")
    return tuple(int(v) for v in pair)
