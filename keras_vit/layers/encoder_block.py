"""The pre-LN Transformer encoder block (paper Eq. 2-3)."""

import keras

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.mlp import MlpBlock
from keras_vit.layers.stochastic_depth import StochasticDepth

LAYER_NORM_EPSILON = 1e-6  # Flax's default, used by the official model.


@keras.saving.register_keras_serializable(package="keras_vit")
class EncoderBlock(keras.layers.Layer):
    """x = x + Drop(Dropout(MSA(LN(x)))); x = x + Drop(MLP(LN(x))).

    `Drop` is stochastic depth (`stochastic_depth_rate`, default 0: none): each
    example's branch is dropped with that probability in training. With
    `layer_scale_init` (a number) each branch is scaled per channel before it is
    added (`LayerScale`, DeiT III, DINOv2): x = x + Drop(LS(MSA(LN(x)))), ...
    `quick_gelu`: the MLP's activation is CLIP's x * sigmoid(1.702 x).
    The newer families' options (none by default): `rope` (rotary position
    embeddings in the attention, of the grid `grid_size` after
    `num_prefix_tokens` tokens; `call(..., patch_map=)` gives a grid known only
    at call time), `qk_norm` (LayerNorm on queries and keys), `gated_mlp`
    (SwiGLU) and `mlp_norm` (a LayerNorm inside the MLP): see
    `MultiHeadSelfAttention` and `MlpBlock`.

    Input shape: (batch, tokens, hidden). Output shape: the same; with
    `return_attention_weights=True` also the weights (batch, heads, tokens, tokens).

    Sub-layers: `LayerNorm_0`, `MultiHeadDotProductAttention_1`, `LayerNorm_2`,
    `MlpBlock_3` (the names of the published checkpoints); with LayerScale
    `LayerScale_1` and `LayerScale_3` (after the attention and the MLP).
    """

    def __init__(
        self,
        num_heads,
        mlp_dim,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        approximate_gelu=True,
        stochastic_depth_rate=0.0,
        layer_scale_init=None,
        quick_gelu=False,
        rope=None,
        grid_size=None,
        num_prefix_tokens=1,
        qk_norm=False,
        gated_mlp=False,
        mlp_norm=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.rope = rope
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.qk_norm = bool(qk_norm)
        self.gated_mlp = bool(gated_mlp)
        self.mlp_norm = bool(mlp_norm)
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        self.quick_gelu = bool(quick_gelu)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.approximate_gelu = bool(approximate_gelu)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        policy = self.dtype_policy  # sub-layers compute as the block does
        self.drop_path = StochasticDepth(self.stochastic_depth_rate, name="drop_path", dtype=policy)
        self.norm_1 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="LayerNorm_0", dtype=policy
        )
        self.attention = MultiHeadSelfAttention(
            self.num_heads,
            dropout_rate=self.attention_dropout_rate,
            rope=rope,
            grid_size=self.grid_size,
            num_prefix_tokens=self.num_prefix_tokens,
            qk_norm=self.qk_norm,
            layer_norm_epsilon=self.layer_norm_epsilon,
            name="MultiHeadDotProductAttention_1",
            dtype=policy,
        )
        self.rope = None if self.attention.rope is None else self.attention.rope.spec
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout", dtype=policy)
        self.norm_2 = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, name="LayerNorm_2", dtype=policy
        )
        self.mlp = MlpBlock(
            self.mlp_dim,
            dropout_rate=self.dropout_rate,
            approximate_gelu=self.approximate_gelu,
            quick_gelu=self.quick_gelu,
            gated=self.gated_mlp,
            inner_norm=self.mlp_norm,
            layer_norm_epsilon=self.layer_norm_epsilon,
            name="MlpBlock_3",
            dtype=policy,
        )
        # None without LayerScale: the default block's layers and weights are as before.
        self.layer_scale_1, self.layer_scale_3 = (
            (
                LayerScale(self.layer_scale_init, name=f"LayerScale_{i}", dtype=policy)
                for i in (1, 3)
            )
            if self.layer_scale_init is not None
            else (None, None)
        )

    def build(self, input_shape):
        for layer in (self.norm_1, self.attention, self.norm_2, self.mlp):
            layer.build(input_shape)
        for layer in (self.layer_scale_1, self.layer_scale_3):
            if layer is not None:
                layer.build(input_shape)

    def call(self, x, training=None, return_attention_weights=False, patch_map=None):
        y = self.norm_1(x)
        grid = {} if patch_map is None else {"patch_map": patch_map}
        y, weights = (
            self.attention(y, training=training, return_attention_weights=True, **grid)
            if return_attention_weights
            else (self.attention(y, training=training, **grid), None)
        )
        y = self.dropout(y, training=training)
        if self.layer_scale_1 is not None:
            y = self.layer_scale_1(y)
        x = x + self.drop_path(y, training=training)
        y = self.mlp(self.norm_2(x), training=training)
        if self.layer_scale_3 is not None:
            y = self.layer_scale_3(y)
        x = x + self.drop_path(y, training=training)
        if return_attention_weights:
            return x, weights
        return x

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_weights=False, patch_map=None):
        """As the attention's: the block keeps the shape and passes its weights on."""
        return self.attention.compute_output_spec(
            x, return_attention_weights=return_attention_weights
        )

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "approximate_gelu": self.approximate_gelu,
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "layer_scale_init": self.layer_scale_init,
                "quick_gelu": self.quick_gelu,
            }
        )
        # The newer options where they are used (absent: the plain block's config).
        if self.rope is not None:
            config.update(
                rope=dict(self.rope),
                grid_size=self.grid_size,
                num_prefix_tokens=self.num_prefix_tokens,
            )
        for key in ("qk_norm", "gated_mlp", "mlp_norm"):
            if getattr(self, key):
                config[key] = True
        return config
