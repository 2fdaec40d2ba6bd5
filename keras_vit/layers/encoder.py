"""The Transformer encoder (paper Eq. 1-4): position embedding, blocks, final LN."""

import keras

from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON, EncoderBlock
from keras_vit.layers.position_embedding import PositionEmbedding
from keras_vit.layers.stochastic_depth import linear_rates


@keras.saving.register_keras_serializable(package="keras_vit")
class Encoder(keras.layers.Layer):
    """Adds position embeddings, applies dropout, `num_layers` encoder blocks and
    the final LayerNorm (`encoder_norm`), as the official `Encoder` module.
    With `final_norm=False` there is no final LayerNorm (`encoder_norm` is None):
    the model normalises after pooling instead (timm's `fc_norm`).

    Input: tokens (batch, num_prefix_tokens + rows*cols, hidden), or the pair
    `(tokens, patch_map)` for a grid known only at call time, which the position
    embedding reads (see `PositionEmbedding`). Output shape: the tokens'. `call(..., return_attention_weights=True)` returns
    `(output, [weights of block 0, ...])`, each (batch, heads, tokens, tokens);
    `return_hidden_states=True` returns `(output, [input to block 0, output of
    block 0, ..., output of the last block before the final LN])`. With both,
    `(output, weights, hidden_states)`.

    Args:
        grid_size: (rows, cols) of the patch grid.
        num_prefix_tokens: 1 with a class token, else 0.
        num_layers, num_heads, mlp_dim, dropout_rate, attention_dropout_rate:
            as in the paper's Table 1 and Appendix B.
        stochastic_depth_rate: the last block's drop rate; block i drops its
            branches with rate * i / (num_layers - 1) (0 for the first block).
        layer_norm_epsilon: every LayerNorm's epsilon (the official 1e-6; 1e-12
            in Hugging Face transformers' ViT).
        approximate_gelu: the MLPs' GELU: the tanh approximation (True, the
            official code's) or the exact erf form (False: timm's, transformers').
        final_norm: whether the encoder ends with its LayerNorm `encoder_norm`.
    """

    def __init__(
        self,
        grid_size,
        num_layers,
        num_heads,
        mlp_dim,
        num_prefix_tokens=1,
        dropout_rate=0.0,
        attention_dropout_rate=0.0,
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        approximate_gelu=True,
        stochastic_depth_rate=0.0,
        final_norm=True,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.grid_size = tuple(int(g) for g in grid_size)
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.mlp_dim = int(mlp_dim)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.dropout_rate = float(dropout_rate)
        self.attention_dropout_rate = float(attention_dropout_rate)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        self.approximate_gelu = bool(approximate_gelu)
        self.stochastic_depth_rate = float(stochastic_depth_rate)
        self.final_norm = bool(final_norm)
        policy = self.dtype_policy  # sub-layers compute as the encoder does
        self.position_embedding = PositionEmbedding(
            self.grid_size, self.num_prefix_tokens, name="posembed_input", dtype=policy
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout", dtype=policy)
        self.blocks = [
            EncoderBlock(
                self.num_heads,
                self.mlp_dim,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                layer_norm_epsilon=self.layer_norm_epsilon,
                approximate_gelu=self.approximate_gelu,
                stochastic_depth_rate=rate,
                name=f"encoderblock_{i}",
                dtype=policy,
            )
            for i, rate in enumerate(linear_rates(self.stochastic_depth_rate, self.num_layers))
        ]
        self.encoder_norm = (
            keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, name="encoder_norm", dtype=policy
            )
            if self.final_norm
            else None
        )

    def build(self, input_shape):
        self.position_embedding.build(input_shape)
        tokens_shape = self.compute_output_shape(input_shape)
        for block in self.blocks:
            block.build(tokens_shape)
        if self.encoder_norm is not None:
            self.encoder_norm.build(tokens_shape)

    def call(self, x, training=None, return_attention_weights=False, return_hidden_states=False):
        x = self.position_embedding(x)
        x = self.dropout(x, training=training)
        weights, hidden_states = [], [x]
        for block in self.blocks:
            if return_attention_weights:
                x, w = block(x, training=training, return_attention_weights=True)
                weights.append(w)
            else:
                x = block(x, training=training)
            hidden_states.append(x)
        output = x if self.encoder_norm is None else self.encoder_norm(x)
        return _pack(output, weights, hidden_states, return_attention_weights, return_hidden_states)

    def compute_output_shape(self, input_shape):
        """The tokens' shape, also from the shapes of a (tokens, patch_map) pair."""
        if isinstance(input_shape[0], (tuple, list)):
            input_shape = input_shape[0]
        return tuple(input_shape)

    def compute_output_spec(
        self, x, training=None, return_attention_weights=False, return_hidden_states=False
    ):
        """KerasTensors of what `call` returns with the same flags (`compute_output_shape`
        alone cannot see them)."""
        tokens = x[0] if isinstance(x, (tuple, list)) else x
        output = keras.KerasTensor(self.compute_output_shape(tokens.shape), self.compute_dtype)
        weights = [
            block.compute_output_spec(tokens, return_attention_weights=True)[1]
            for block in self.blocks
        ]
        states = [
            keras.KerasTensor(output.shape, self.compute_dtype) for _ in range(len(weights) + 1)
        ]
        return _pack(output, weights, states, return_attention_weights, return_hidden_states)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "grid_size": self.grid_size,
                "num_layers": self.num_layers,
                "num_heads": self.num_heads,
                "mlp_dim": self.mlp_dim,
                "num_prefix_tokens": self.num_prefix_tokens,
                "dropout_rate": self.dropout_rate,
                "attention_dropout_rate": self.attention_dropout_rate,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "approximate_gelu": self.approximate_gelu,
                "stochastic_depth_rate": self.stochastic_depth_rate,
                "final_norm": self.final_norm,
            }
        )
        return config


def _pack(output, weights, hidden_states, return_attention_weights, return_hidden_states):
    """`output`, or (output, weights), (output, hidden_states) or (output, weights,
    hidden_states) as the flags ask: what `Encoder.call` returns."""
    extras = ([weights] if return_attention_weights else []) + (
        [hidden_states] if return_hidden_states else []
    )
    return (output, *extras) if extras else output
