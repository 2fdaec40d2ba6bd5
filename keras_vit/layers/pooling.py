"""The image representation taken from the encoder output (paper Eq. 4)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class TokenPooling(keras.layers.Layer):
    """'token': the class token's output; 'gap': the mean over all tokens.

    Input shape: (batch, tokens, hidden). Output shape: (batch, hidden).
    """

    def __init__(self, classifier="token", **kwargs):
        super().__init__(**kwargs)
        if classifier not in ("token", "gap"):
            raise ValueError(f"classifier must be 'token' or 'gap', got {classifier!r}.")
        self.classifier = classifier

    def call(self, tokens):
        if self.classifier == "token":
            return tokens[:, 0]
        return ops.mean(tokens, axis=1)

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[-1])

    def get_config(self):
        config = super().get_config()
        config["classifier"] = self.classifier
        return config
