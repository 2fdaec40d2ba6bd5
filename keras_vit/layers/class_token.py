"""The learnable [class] token prepended to the patch sequence (paper Eq. 1)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class ClassToken(keras.layers.Layer):
    """Prepends a learned token to a sequence.

    Input shape: (batch, tokens, hidden). Output shape: (batch, 1 + tokens, hidden).
    Weight: `cls` (1, 1, hidden), initialised to zeros as in the official code.
    """

    def build(self, input_shape):
        self.cls = self.add_weight(name="cls", shape=(1, 1, input_shape[-1]), initializer="zeros")

    def call(self, tokens):
        batch = ops.shape(tokens)[0]
        cls = ops.cast(self.cls, tokens.dtype)
        cls = ops.broadcast_to(cls, (batch, 1, ops.shape(self.cls)[-1]))
        return ops.concatenate([cls, tokens], axis=1)

    def compute_output_shape(self, input_shape):
        batch, tokens, hidden = input_shape
        return (batch, None if tokens is None else tokens + 1, hidden)
