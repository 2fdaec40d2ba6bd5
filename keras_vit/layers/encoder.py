"""The Transformer encoder (paper Eq. 1-4): position embedding, blocks, final LN."""

import keras

from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON, EncoderBlock
from keras_vit.layers.position_embedding import PositionEmbedding
from keras_vit.layers.register_tokens import RegisterTokens
from keras_vit.layers.rotary import rope_spec
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
        num_registers: register tokens (`RegisterTokens`, DINOv2 with
            registers) inserted after the class token once the position
            embedding is added; the output has them (`num_output_prefix_tokens`).
        position_embedding_for_class_token: whether the class token gets a
            position embedding (the original ViT, DINOv2) or only the patches
            do (False: DeiT III, timm's no_embed_class).
        pre_norm: a LayerNorm `encoder_prenorm` on the tokens before the first
            block (CLIP's ln_pre).
        layer_scale_init: LayerScale in every block, with this initial value;
            None: none.
        quick_gelu: the MLPs' activation is CLIP's x * sigmoid(1.702 x).
        absolute_position_embedding: whether learned position embeddings are
            added (`posembed_input`; False: none, `position_embedding` is None:
            DINOv3, RoPE-ViT, whose positions are rotary alone).
        rope: rotary position embeddings in every block's attention
            (`keras_vit.layers.rotary.rope_spec`), on the patch tokens after the
            class token and the registers; None: none.
        qk_norm, gated_mlp, mlp_norm: LayerNorm on queries and keys, SwiGLU MLPs,
            a LayerNorm inside the MLPs (`EncoderBlock`).
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
        num_registers=0,
        position_embedding_for_class_token=True,
        pre_norm=False,
        layer_scale_init=None,
        quick_gelu=False,
        absolute_position_embedding=True,
        rope=None,
        qk_norm=False,
        gated_mlp=False,
        mlp_norm=False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.absolute_position_embedding = bool(absolute_position_embedding)
        self.rope = rope_spec(rope)
        self.qk_norm = bool(qk_norm)
        self.gated_mlp = bool(gated_mlp)
        self.mlp_norm = bool(mlp_norm)
        self.num_registers = int(num_registers)
        self.position_embedding_for_class_token = bool(position_embedding_for_class_token)
        self.pre_norm = bool(pre_norm)
        self.layer_scale_init = None if layer_scale_init is None else float(layer_scale_init)
        self.quick_gelu = bool(quick_gelu)
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
        self.position_embedding = (
            PositionEmbedding(
                self.grid_size,
                self.num_prefix_tokens,
                embed_prefix_tokens=self.position_embedding_for_class_token,
                name="posembed_input",
                dtype=policy,
            )
            if self.absolute_position_embedding
            else None
        )
        # None where absent: the default encoder's layers and weights are as before.
        self.registers = (
            RegisterTokens(
                self.num_registers, self.num_prefix_tokens, name="registers", dtype=policy
            )
            if self.num_registers
            else None
        )
        self.dropout = keras.layers.Dropout(self.dropout_rate, name="dropout", dtype=policy)
        self.encoder_prenorm = (
            keras.layers.LayerNormalization(
                epsilon=self.layer_norm_epsilon, name="encoder_prenorm", dtype=policy
            )
            if self.pre_norm
            else None
        )
        self.blocks = [
            EncoderBlock(
                self.num_heads,
                self.mlp_dim,
                dropout_rate=self.dropout_rate,
                attention_dropout_rate=self.attention_dropout_rate,
                layer_norm_epsilon=self.layer_norm_epsilon,
                approximate_gelu=self.approximate_gelu,
                stochastic_depth_rate=rate,
                layer_scale_init=self.layer_scale_init,
                quick_gelu=self.quick_gelu,
                name=f"encoderblock_{i}",
                dtype=policy,
                **self._block_options(),
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

    @property
    def num_output_prefix_tokens(self):
        """The tokens before the patches in the output: the class token and the
        registers."""
        return self.num_prefix_tokens + self.num_registers

    def _block_options(self):
        """The blocks' arguments for the newer options, where they are used."""
        options = {key: True for key in ("qk_norm", "gated_mlp", "mlp_norm") if getattr(self, key)}
        if self.rope is not None:
            options.update(
                rope=self.rope,
                grid_size=self.grid_size,
                num_prefix_tokens=self.num_output_prefix_tokens,
            )
        return options

    def build(self, input_shape):
        if self.position_embedding is not None:
            self.position_embedding.build(input_shape)
        tokens_shape = self.compute_output_shape(input_shape)
        if self.registers is not None:
            pair = isinstance(input_shape[0], (tuple, list))
            self.registers.build(tuple(input_shape[0] if pair else input_shape))
        if self.encoder_prenorm is not None:
            self.encoder_prenorm.build(tokens_shape)
        for block in self.blocks:
            block.build(tokens_shape)
        if self.encoder_norm is not None:
            self.encoder_norm.build(tokens_shape)

    def embedded(self, x, training=None):
        """The first block's input: position embeddings added to the tokens (or
        the (tokens, patch_map) pair), registers inserted, dropout, the pre-norm.
        What `call` and the views (`keras_vit.views`) run before the blocks."""
        if self.position_embedding is not None:
            x = self.position_embedding(x)
        elif isinstance(x, (tuple, list)):  # the grid is the rotary embedding's affair
            x = x[0]
        if self.registers is not None:
            x = self.registers(x)
        x = self.dropout(x, training=training)
        if self.encoder_prenorm is not None:
            x = self.encoder_prenorm(x)
        return x

    def block_arguments(self, x):
        """What each block is called with beside the tokens, for the encoder's input
        `x` (the tokens, or the (tokens, patch_map) pair): the patch map where a
        rotary embedding needs the grid of each call, else nothing."""
        if self.rope is not None and isinstance(x, (tuple, list)):
            return {"patch_map": x[1]}
        return {}

    def call(self, x, training=None, return_attention_weights=False, return_hidden_states=False):
        grid = self.block_arguments(x)
        x = self.embedded(x, training=training)
        weights, hidden_states = [], [x]
        for block in self.blocks:
            if return_attention_weights:
                x, w = block(x, training=training, return_attention_weights=True, **grid)
                weights.append(w)
            else:
                x = block(x, training=training, **grid)
            hidden_states.append(x)
        output = x if self.encoder_norm is None else self.encoder_norm(x)
        return _pack(output, weights, hidden_states, return_attention_weights, return_hidden_states)

    def compute_output_shape(self, input_shape):
        """The tokens' shape, also from the shapes of a (tokens, patch_map) pair."""
        if isinstance(input_shape[0], (tuple, list)):
            input_shape = input_shape[0]
        batch, tokens, hidden = input_shape
        if self.num_registers and tokens is not None:
            tokens += self.num_registers
        return (batch, tokens, hidden)

    def compute_output_spec(
        self, x, training=None, return_attention_weights=False, return_hidden_states=False
    ):
        """KerasTensors of what `call` returns with the same flags (`compute_output_shape`
        alone cannot see them)."""
        tokens = x[0] if isinstance(x, (tuple, list)) else x
        output = keras.KerasTensor(self.compute_output_shape(tokens.shape), self.compute_dtype)
        weights = [
            block.compute_output_spec(output, return_attention_weights=True)[1]
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
                "num_registers": self.num_registers,
                "position_embedding_for_class_token": self.position_embedding_for_class_token,
                "pre_norm": self.pre_norm,
                "layer_scale_init": self.layer_scale_init,
                "quick_gelu": self.quick_gelu,
            }
        )
        # The newer options where they differ from the authors' (absent: theirs).
        if not self.absolute_position_embedding:
            config["absolute_position_embedding"] = False
        if self.rope is not None:
            config["rope"] = dict(self.rope)
        for key in ("qk_norm", "gated_mlp", "mlp_norm"):
            if getattr(self, key):
                config[key] = True
        return config


def _pack(output, weights, hidden_states, return_attention_weights, return_hidden_states):
    """`output`, or (output, weights), (output, hidden_states) or (output, weights,
    hidden_states) as the flags ask: what `Encoder.call` returns."""
    extras = ([weights] if return_attention_weights else []) + (
        [hidden_states] if return_hidden_states else []
    )
    return (output, *extras) if extras else output
