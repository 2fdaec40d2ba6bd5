"""Weight-standardised convolution (BiT; the hybrids' ResNet, paper §3.1)."""

import keras
from keras import ops

from keras_vit.layers.patch_embedding import to_pair


@keras.saving.register_keras_serializable(package="keras_vit")
class StdConv2D(keras.layers.Layer):
    """A bias-free 2-D convolution whose kernel is standardised at every call.

    As the official `models_resnet.StdConv` (`weight_standardize`):
        w <- w - mean(w);  w <- w / (std(w) + epsilon)
    with mean and (population) std per output channel over (height, width,
    in_channels), epsilon 1e-5 added to the std, not to the variance.

    Padding 'same' is the TensorFlow/XLA rule (what Flax's 'SAME' does): the
    output has ceil(size / stride) rows and columns and the total padding
    max((out - 1) * stride + kernel - size, 0) is split with the extra row or
    column at the bottom/right. Both the TensorFlow and the JAX backends of
    `keras.ops.conv` implement exactly this rule.

    Input shape: (batch, height, width, in_channels). Output shape:
    (batch, ceil(height / stride), ceil(width / stride), filters) for 'same'.

    Weight: `kernel` (kernel_h, kernel_w, in_channels, filters) (HWIO, the
    checkpoint's layout), the raw (unstandardised) values.
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="same",
        epsilon=1e-5,
        kernel_initializer="lecun_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = int(filters)
        self.kernel_size = to_pair(kernel_size, "kernel_size")
        self.strides = to_pair(strides, "strides")
        if padding not in ("same", "valid"):
            raise ValueError(f"{self.name}: padding must be 'same' or 'valid', got {padding!r}.")
        self.padding = padding
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(*self.kernel_size, input_shape[-1], self.filters),
            initializer=self.kernel_initializer,
        )

    def standardized_kernel(self):
        """The kernel as the convolution uses it: per output channel zero mean
        and unit (population) std, up to epsilon."""
        w = self.kernel
        w = w - ops.mean(w, axis=(0, 1, 2), keepdims=True)
        std = ops.sqrt(ops.mean(ops.square(w), axis=(0, 1, 2), keepdims=True))
        return w / (std + self.epsilon)

    def call(self, inputs):
        kernel = ops.cast(self.standardized_kernel(), inputs.dtype)
        return ops.conv(inputs, kernel, strides=self.strides, padding=self.padding)

    def compute_output_shape(self, input_shape):
        batch, height, width = input_shape[:3]
        return (
            batch,
            *(
                _out_size(size, k, s, self.padding)
                for size, k, s in zip((height, width), self.kernel_size, self.strides)
            ),
            self.filters,
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "filters": self.filters,
                "kernel_size": self.kernel_size,
                "strides": self.strides,
                "padding": self.padding,
                "epsilon": self.epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            }
        )
        return config


def _out_size(size, kernel, stride, padding):
    if size is None:
        return None
    if padding == "same":
        return -(-size // stride)
    return (size - kernel) // stride + 1
