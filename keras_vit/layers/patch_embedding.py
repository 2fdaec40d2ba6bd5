"""Patch embedding (paper Eq. 1): a linear projection of flattened patches."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchEmbedding(keras.layers.Layer):
    """Splits an image into P x P patches and projects each to `hidden_size`.

    Implemented as the official code does: a convolution with kernel = stride =
    patch size, 'VALID' padding and a bias, then flattened row-major to tokens.

    Input shape: (batch, height, width, channels), height and width multiples
    of the patch size. Output shape: (batch, (height/P) * (width/P), hidden_size).

    Weights: `kernel` (P, P, channels, hidden_size) (HWIO, the checkpoint's
    layout), `bias` (hidden_size,).
    """

    def __init__(
        self,
        patch_size,
        hidden_size,
        kernel_initializer="lecun_normal",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
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
        self.bias = self.add_weight(
            name="bias", shape=(self.hidden_size,), initializer=self.bias_initializer
        )

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

    def call(self, images):
        x = ops.conv(images, self.kernel, strides=self.patch_size, padding="valid")
        x = x + self.bias
        shape = ops.shape(x)
        return ops.reshape(x, (-1, shape[1] * shape[2], self.hidden_size))

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[:3]
        if height is None or width is None:
            return (batch, None, self.hidden_size)
        rows, cols = self.grid_size((height, width))
        return (batch, rows * cols, self.hidden_size)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "patch_size": self.patch_size,
                "hidden_size": self.hidden_size,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            }
        )
        return config


def to_pair(value, what="value"):
    """An int or a pair of ints as a (height, width) tuple."""
    if isinstance(value, int):
        return (value, value)
    value = tuple(int(v) for v in value)
    if len(value) != 2:
        raise ValueError(f"{what} must be an int or (height, width), got {value!r}.")
    return value
