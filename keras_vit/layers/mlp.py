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

    `gated=True`: a SwiGLU (Shazeer 2020; EVA-02, DINOv3's larger models):
    `Dense_0` is (hidden, 2 * mlp_dim), its first half the gate g and its second
    the value v (timm's packed `GluMlp` layout; split weights, timm's `fc1_g` /
    `fc1_x`, transformers' `gate_proj` / `up_proj`, are concatenated so), and
    the activation is SiLU(g) * v (the GELU options are then not read).
    `inner_norm=True`: a LayerNorm `norm` (epsilon `layer_norm_epsilon`) on the
    mlp_dim activations before `Dense_1` (EVA-02's base and large, timm's
    `scale_mlp`).

    Input shape: (..., hidden). Output shape: (..., hidden).
    Sub-layers `Dense_0` (hidden, mlp_dim) and `Dense_1` (mlp_dim, hidden).
    """

    def __init__(
        self,
        mlp_dim,
        dropout_rate=0.0,
        approximate_gelu=True,
        quick_gelu=False,
        gated=False,
        inner_norm=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.approximate_gelu = bool(approximate_gelu)
        self.quick_gelu = bool(quick_gelu)
        self.gated = bool(gated)
        self.inner_norm = bool(inner_norm)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.norm = (
            keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, name="norm", dtype=self.dtype_policy
            )
            if self.inner_norm
            else None
        )
        self.dense_0 = keras.layers.Dense(
            2 * self.mlp_dim if self.gated else self.mlp_dim,
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
        if self.norm is not None:
            self.norm.build((*input_shape[:-1], self.mlp_dim))

    def call(self, x, training=None):
        # On (rows, hidden), flattened: TensorFlow's CPU path (oneDNN) then runs each matmul
        # with its bias, and Dense_0's with the GELU too, as one fused kernel; on a 3-D input
        # the matmul is reshaped around and the GELU's eight element-wise ops run apart
        # (docs/speed.md: a quarter of a bfloat16 ViT-B/16 step).
        shape = keras.ops.shape(x)
        x = keras.ops.reshape(x, (-1, shape[-1]))
        x = self.dense_0(x)
        if self.gated:
            x = keras.activations.silu(x[:, : self.mlp_dim]) * x[:, self.mlp_dim :]
        elif self.quick_gelu:
            x = quick_gelu(x)
        else:
            x = keras.activations.gelu(x, approximate=self.approximate_gelu)
        x = self.dropout(x, training=training)
        if self.norm is not None:
            x = self.norm(x)
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
        # The newer options where they are used (absent: the plain MLP's config).
        if self.gated:
            config["gated"] = True
        if self.inner_norm:
            config.update(inner_norm=True, layer_norm_epsilon=self.layer_norm_epsilon)
        return config


def quick_gelu(x):
    """OpenAI CLIP's GELU approximation x * sigmoid(1.702 x) (`QuickGELU` in CLIP,
    timm's act_layer='quick_gelu', transformers' hidden_act='quick_gelu')."""
    x = keras.ops.convert_to_tensor(x)
    return x * keras.ops.sigmoid(1.702 * x)
