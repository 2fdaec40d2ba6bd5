"""Multi-head attention pooling (MAP; Zhai et al., "Scaling Vision Transformers",
CVPR 2022, big_vision's `MAPHead`): the representation of SigLIP's vision tower."""

import keras
from keras import ops

from keras_vit.initializers import xavier_uniform
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON
from keras_vit.layers.mlp import MlpBlock


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadAttentionPooling(keras.layers.Layer):
    """A learned probe token attends to every token; then a residual MLP on its
    LayerNorm: x = MHA(probe, tokens); x = x + MLP(LN(x)); the output is x. As
    big_vision's `MAPHead` (SigLIP), timm's `AttentionPoolLatent` (global_pool=
    'map') and transformers' `SiglipMultiheadAttentionPoolingHead`.

    Input shape: (batch, tokens, hidden). Output shape: (batch, hidden).

    Weights (big_vision's names): `probe` (1, 1, hidden), Xavier-uniform;
    `MultiHeadDotProductAttention_0` (query, key, value, out, laid out as
    `MultiHeadSelfAttention`'s), `LayerNorm_0`, `MlpBlock_0` (Dense_0, Dense_1).

    Args:
        num_heads: the attention's heads (the encoder's).
        mlp_dim: the MLP's width (the encoder's).
        layer_norm_epsilon, approximate_gelu, quick_gelu: as the encoder's
            blocks (the MLP's activation is theirs).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        approximate_gelu=True,
        quick_gelu=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.approximate_gelu = bool(approximate_gelu)
        self.quick_gelu = bool(quick_gelu)
        policy = self.dtype_policy
        self.attention = MultiHeadSelfAttention(
            self.num_heads, name="MultiHeadDotProductAttention_0", dtype=policy
        )
        self.norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy
        )
        self.mlp = MlpBlock(
            self.mlp_dim,
            approximate_gelu=self.approximate_gelu,
            quick_gelu=self.quick_gelu,
            name="MlpBlock_0",
            dtype=policy,
        )

    def build(self, input_shape):
        hidden = input_shape[-1]
        self.probe = self.add_weight(
            name="probe", shape=(1, 1, hidden), initializer=xavier_uniform()
        )
        self.attention.build(input_shape)
        self.norm.build((input_shape[0], 1, hidden))
        self.mlp.build((input_shape[0], 1, hidden))

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        probe = ops.cast(self.probe, tokens.dtype)
        probe = ops.broadcast_to(probe, (batch, 1, tokens.shape[-1]))
        x = self.attention.attend(probe, tokens)
        x = x + self.mlp(self.norm(x))
        return x[:, 0]

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "approximate_gelu": self.approximate_gelu,
                "quick_gelu": self.quick_gelu,
            }
        )
        return config
