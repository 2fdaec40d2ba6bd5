"""Register tokens (Darcet et al., "Vision Transformers Need Registers", ICLR
2024): extra learned tokens that join the sequence and are dropped at the end."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class RegisterTokens(keras.layers.Layer):
    """Inserts `num_registers` learned tokens after the first
    `num_prefix_tokens` tokens (the class token): [class, registers, patches],
    the order of DINOv2 with registers (its code, timm's `reg_token`,
    transformers' `register_tokens`). The registers get no position embedding:
    the encoder inserts them after adding it. They take part in attention and are
    dropped from the features and from class-token and average pooling.

    Input shape: (batch, tokens, hidden). Output shape: (batch, tokens +
    num_registers, hidden).
    Weight: `registers` (1, num_registers, hidden), initialised normal(stddev=1e-6)
    as DINOv2's and timm's.

    Args:
        num_registers: how many register tokens (4 for DINOv2's).
        num_prefix_tokens: tokens before them (1 with a class token, else 0).
    """

    def __init__(self, num_registers, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        self.num_registers = int(num_registers)
        self.num_prefix_tokens = int(num_prefix_tokens)
        if self.num_registers < 1:
            raise ValueError(f"num_registers must be at least 1, got {num_registers!r}.")

    def build(self, input_shape):
        self.registers = self.add_weight(
            name="registers",
            shape=(1, self.num_registers, input_shape[-1]),
            initializer=keras.initializers.RandomNormal(stddev=1e-6),
        )

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        registers = ops.cast(self.registers, tokens.dtype)
        registers = ops.broadcast_to(registers, (batch, self.num_registers, tokens.shape[-1]))
        prefix = self.num_prefix_tokens
        return ops.concatenate([tokens[:, :prefix], registers, tokens[:, prefix:]], axis=1)

    def compute_output_shape(self, input_shape):
        batch, tokens, hidden = input_shape
        return (batch, None if tokens is None else tokens + self.num_registers, hidden)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"num_registers": self.num_registers, "num_prefix_tokens": self.num_prefix_tokens}
        )
        return config
