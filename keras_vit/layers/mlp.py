"""The Transformer MLP block (paper Eq. 3): Dense -> GELU -> Dense."""

import keras

from keras_vit import initializers


@keras.saving.register_keras_serializable(package="keras_vit")
class MlpBlock(keras.layers.Layer):
    """Dense(mlp_dim) -> GELU -> Dropout -> Dense(hidden) -> Dropout.

    GELU is the tanh approximation by default, as `flax.linen.gelu` (the
    official code); `approximate_gelu=False` gives the exact erf form.
    `quick_gelu=True` replaces it by OpenAI CLIP's x * sigmoid(1.702 x)
    (`quick_gelu`; `approximate_gelu` is then not read).
    Kernels Xavier-uniform, biases normal(stddev=1e-6), as the official `MlpBlock`.

    Input shape: (..., hidden). Output shape: (..., hidden).
    Sub-layers `Dense_0` (hidden, mlp_dim) and `Dense_1` (mlp_dim, hidden).
    """

    def __init__(
        self, mlp_dim, dropout_rate=0.0, approximate_gelu=True, quick_gelu=False, **kwargs
    ):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.quick_gelu = bool(quick_gelu)
        self.dense_0 = keras.layers.Dense(
            self.mlp_dim,
            kernel_initializer=initializers.xavier_uniform(),
            bias_initializer=initializers.mlp_bias(),
            name="Dense_0",
            dtype=self.dtype_policy,
        )
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, name="dropout", dtype=self.dtype_policy
        )

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.dense_0.build(input_shape)
        self.dense_1 = keras.layers.Dense(
            hidden,
            kernel_initializer=initializers.xavier_uniform(),
            bias_initializer=initializers.mlp_bias(),
            name="Dense_1",
            dtype=self.dtype_policy,
        )
        self.dense_1.build((*input_shape[:-1], self.mlp_dim))

    def call(self, x, training=None):
        # On (rows, hidden), flattened: TensorFlow's CPU path (oneDNN) then runs each matmul
        # with its bias, and Dense_0's with the GELU too, as one fused kernel; on a 3-D input
        # the matmul is reshaped around and the GELU's eight element-wise ops run apart
        # (docs/speed.md: a quarter of a bfloat16 ViT-B/16 step).
        shape = keras.ops.shape(x)
        x = keras.ops.reshape(x, (-1, shape[-1]))
        x = self.dense_0(x)
        if self.quick_gelu:
            x = quick_gelu(x)
        else:
            x = keras.activations.gelu(x, approximate=self.approximate_gelu)
        x = self.dropout(x, training=training)
        x = self.dense_1(x)
        x = keras.ops.reshape(x, shape)
        return self.dropout(x, training=training)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "approximate_gelu": self.approximate_gelu,
                "quick_gelu": self.quick_gelu,
            }
        )
        return config


def quick_gelu(x):
    """OpenAI CLIP's GELU approximation x * sigmoid(1.702 x) (`QuickGELU` in CLIP,
    timm's act_layer='quick_gelu', transformers' hidden_act='quick_gelu')."""
    x = keras.ops.convert_to_tensor(x)
    return x * keras.ops.sigmoid(1.702 * x)
