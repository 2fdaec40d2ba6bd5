"""Multi-head self-attention (paper Eq. 2, Appendix A)."""

import math

import keras
from keras import ops

from keras_vit.initializers import FlatGlorotUniform
from keras_vit.layers.rotary import RotaryPositionEmbedding


def check_heads(hidden_size, num_heads, where=None):
    """The attention's size rule: `num_heads` divides `hidden_size` (each head gets
    hidden_size / num_heads channels). A ValueError otherwise, prefixed by `where` (the
    layer's name). Trainers check a config with it before building anything."""
    if hidden_size % num_heads:
        prefix = f"{where}: " if where else ""
        raise ValueError(
            f"{prefix}hidden size {hidden_size} is not divisible by {num_heads} heads."
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head dot-product self-attention, laid out as the official Flax module.

    softmax(q k^T / sqrt(head_dim)) v per head, then an output projection.

    Input shape: (batch, tokens, hidden). Output shape: (batch, tokens, hidden);
    with `return_attention_weights=True`, also the attention weights
    (batch, heads, tokens, tokens), whose rows sum to 1.

    Weights (checkpoint layout): `query_kernel`, `key_kernel`, `value_kernel`
    (hidden, heads, head_dim) with biases (heads, head_dim); `out_kernel`
    (heads, head_dim, hidden) with bias (hidden,). Kernels are Xavier-uniform
    over the flattened (hidden, hidden) matrix, biases zero.

    When the weights are not asked for (and no attention dropout is active) the
    layer uses the fused `keras.ops.dot_product_attention`; otherwise it
    computes the softmax explicitly, in float32. Both give the same outputs.

    Args:
        num_heads: number of attention heads; must divide the hidden size.
        dropout_rate: dropout on the attention weights.
        use_fused_attention: allow the fused kernel when weights are not needed.
        rope: rotary position embeddings on the queries and keys of the patch
            tokens (`keras_vit.layers.rotary.rope_spec`; EVA-02, RoPE-ViT,
            DINOv3): the sub-layer `rope` (`RotaryPositionEmbedding`) of the grid
            `grid_size` with `num_prefix_tokens` tokens before it. None: none.
        qk_norm: a LayerNorm over each head's channels on the queries and keys
            (`query_norm`, `key_norm`, epsilon `layer_norm_epsilon`), before the
            rotation.
        pad_tokens_to_multiple: on the fused path, pad the token axis of q, k and
            v with zeros up to a multiple of this (e.g. 64) and mask the padding
            keys, for fused kernels that want aligned sequence lengths (cuDNN
            flash attention refuses 197); the padding queries are dropped, so
            the outputs are unchanged. None: no padding. Off by default: it has
            not been measured faster on a GPU yet (docs/speed.md).
    """

    def __init__(
        self,
        num_heads,
        dropout_rate=0.0,
        use_fused_attention=True,
        pad_tokens_to_multiple=None,
        rope=None,
        grid_size=None,
        num_prefix_tokens=1,
        qk_norm=False,
        layer_norm_epsilon=1e-6,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = int(num_heads)
        self.grid_size = None if grid_size is None else tuple(int(g) for g in grid_size)
        self.num_prefix_tokens = int(num_prefix_tokens)
        self.qk_norm = bool(qk_norm)
        self.layer_norm_epsilon = float(layer_norm_epsilon)
        # None where absent: the plain attention's sub-layers and weights are as before.
        self.rope = (
            RotaryPositionEmbedding(
                rope,
                self.grid_size,
                self.num_prefix_tokens,
                self.num_heads,
                name="rope",
                dtype=self.dtype_policy,
            )
            if rope is not None
            else None
        )
        self.query_norm, self.key_norm = (
            (
                keras.layers.LayerNormalization(
                    epsilon=self.layer_norm_epsilon, name=name, dtype=self.dtype_policy
                )
                for name in ("query_norm", "key_norm")
            )
            if self.qk_norm
            else (None, None)
        )
        self.dropout_rate = float(dropout_rate)
        self.use_fused_attention = bool(use_fused_attention)
        if pad_tokens_to_multiple is not None and int(pad_tokens_to_multiple) < 1:
            raise ValueError(
                f"pad_tokens_to_multiple must be a positive int or None, "
                f"got {pad_tokens_to_multiple!r}."
            )
        self.pad_tokens_to_multiple = (
            None if pad_tokens_to_multiple is None else int(pad_tokens_to_multiple)
        )
        self.dropout = keras.layers.Dropout(
            self.dropout_rate, name="dropout", dtype=self.dtype_policy
        )

    def build(self, input_shape):
        hidden = input_shape[-1]
        check_heads(hidden, self.num_heads, self.name)
        self.hidden_size = hidden
        self.head_dim = hidden // self.num_heads
        heads = (self.num_heads, self.head_dim)
        for name in ("query", "key", "value"):
            setattr(
                self,
                f"{name}_kernel",
                self.add_weight(
                    name=f"{name}_kernel",
                    shape=(hidden, *heads),
                    initializer=FlatGlorotUniform(in_axes=1),
                ),
            )
            setattr(
                self,
                f"{name}_bias",
                self.add_weight(name=f"{name}_bias", shape=heads, initializer="zeros"),
            )
        self.out_kernel = self.add_weight(
            name="out_kernel", shape=(*heads, hidden), initializer=FlatGlorotUniform(in_axes=2)
        )
        self.out_bias = self.add_weight(name="out_bias", shape=(hidden,), initializer="zeros")
        per_head = (None, None, *heads)
        for layer in (self.query_norm, self.key_norm, self.rope):
            if layer is not None:
                layer.build(per_head)

    def _project(self, rows, tokens, kernel, bias):
        """(B*N, D) rows @ (D, H, hd) + (H, hd) -> (B, N, H, hd)."""
        width = self.num_heads * self.head_dim
        y = ops.matmul(rows, ops.reshape(ops.cast(kernel, rows.dtype), (self.hidden_size, width)))
        y = y + ops.reshape(ops.cast(bias, rows.dtype), (width,))
        return ops.reshape(y, (-1, tokens, self.num_heads, self.head_dim))

    def call(self, x, training=None, return_attention_weights=False, patch_map=None):
        """`patch_map` (batch, rows, cols, any): the grid of the tokens for the
        rotary embedding, where it is known only at call time (its shape is read)."""
        scale = 1.0 / math.sqrt(self.head_dim)
        tokens = ops.shape(x)[1]
        # Matmuls on (batch * tokens, hidden) rows: a 2-D matmul and its bias are one fused
        # kernel on TensorFlow's CPU path (oneDNN), where a 3-D one is reshaped around.
        rows = ops.reshape(x, (-1, self.hidden_size))
        query = self._project(rows, tokens, self.query_kernel, self.query_bias)
        key = self._project(rows, tokens, self.key_kernel, self.key_bias)
        value = self._project(rows, tokens, self.value_kernel, self.value_bias)
        if self.query_norm is not None:
            query, key = self.query_norm(query), self.key_norm(key)
        if self.rope is not None:
            sin, cos = self.rope.tables(*self.rope.grid(patch_map))
            query, key = self.rope.rotate(query, sin, cos), self.rope.rotate(key, sin, cos)
        dropout_active = self.dropout_rate > 0 and training
        if self.use_fused_attention and not return_attention_weights and not dropout_active:
            context = self._fused_attention(query, key, value, scale)
            weights = None
        else:
            context, weights = self._explicit_attention(query, key, value, scale, training)
        context = ops.reshape(context, (-1, self.hidden_size))
        out_kernel = ops.reshape(
            ops.cast(self.out_kernel, x.dtype), (self.hidden_size, self.hidden_size)
        )
        output = ops.matmul(context, out_kernel) + ops.cast(self.out_bias, x.dtype)
        output = ops.reshape(output, ops.shape(x))
        if return_attention_weights:
            return output, weights
        return output

    def attend(self, queries, x):
        """Cross-attention with this layer's weights: the `queries` (batch, Q,
        hidden) attend to the tokens `x` (batch, N, hidden); returns (batch, Q,
        hidden). What big_vision's MAP head computes (`MultiHeadAttentionPooling`:
        its probe attends to the encoder's tokens)."""
        scale = 1.0 / math.sqrt(self.head_dim)
        num_queries, tokens = ops.shape(queries)[1], ops.shape(x)[1]
        query = self._project(
            ops.reshape(queries, (-1, self.hidden_size)),
            num_queries,
            self.query_kernel,
            self.query_bias,
        )
        rows = ops.reshape(x, (-1, self.hidden_size))
        key = self._project(rows, tokens, self.key_kernel, self.key_bias)
        value = self._project(rows, tokens, self.value_kernel, self.value_bias)
        context = ops.dot_product_attention(query, key, value, scale=scale)
        context = ops.reshape(context, (-1, self.hidden_size))
        out_kernel = ops.reshape(
            ops.cast(self.out_kernel, x.dtype), (self.hidden_size, self.hidden_size)
        )
        output = ops.matmul(context, out_kernel) + ops.cast(self.out_bias, x.dtype)
        return ops.reshape(output, (-1, num_queries, self.hidden_size))

    def _fused_attention(self, query, key, value, scale):
        """(B, N, H, hd) q, k, v -> context (B, N, H, hd) via the fused op, with
        the token axis padded to `pad_tokens_to_multiple` where that is set and N
        is static and not already a multiple."""
        tokens = query.shape[1]
        multiple = self.pad_tokens_to_multiple
        if not multiple or tokens is None or tokens % multiple == 0:
            return ops.dot_product_attention(query, key, value, scale=scale)
        padded = -(-tokens // multiple) * multiple
        widths = ((0, 0), (0, padded - tokens), (0, 0), (0, 0))
        query, key, value = (ops.pad(t, widths) for t in (query, key, value))
        real_keys = ops.arange(padded) < tokens
        mask = ops.broadcast_to(real_keys[None, None, None, :], (1, 1, padded, padded))
        context = ops.dot_product_attention(query, key, value, mask=mask, scale=scale)
        return context[:, :tokens]

    def _explicit_attention(self, query, key, value, scale, training):
        """Returns context (B, N, H, hd) and weights (B, H, N, N)."""
        query = ops.transpose(query, (0, 2, 1, 3)) * ops.cast(scale, query.dtype)
        logits = ops.matmul(query, ops.transpose(key, (0, 2, 3, 1)))
        weights = ops.softmax(ops.cast(logits, "float32"), axis=-1)
        weights = ops.cast(weights, value.dtype)
        dropped = self.dropout(weights, training=training)
        context = ops.matmul(dropped, ops.transpose(value, (0, 2, 1, 3)))
        return ops.transpose(context, (0, 2, 1, 3)), weights

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def compute_output_spec(self, x, training=None, return_attention_weights=False, patch_map=None):
        """The output's KerasTensor and, with `return_attention_weights`, the weights'
        (batch, heads, tokens, tokens); `compute_output_shape` alone cannot see the flag."""
        output = keras.KerasTensor(self.compute_output_shape(x.shape), dtype=self.compute_dtype)
        if not return_attention_weights:
            return output
        batch, tokens = x.shape[:2]
        weights = keras.KerasTensor((batch, self.num_heads, tokens, tokens), self.compute_dtype)
        return output, weights

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "dropout_rate": self.dropout_rate,
                "use_fused_attention": self.use_fused_attention,
                "pad_tokens_to_multiple": self.pad_tokens_to_multiple,
            }
        )
        # The newer options where they are used (absent: the plain attention's config).
        if self.rope is not None:
            config.update(
                rope=dict(self.rope.spec),
                grid_size=self.grid_size,
                num_prefix_tokens=self.num_prefix_tokens,
            )
        if self.qk_norm:
            config.update(qk_norm=True, layer_norm_epsilon=self.layer_norm_epsilon)
        return config
