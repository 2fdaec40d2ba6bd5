"""LayerScale (Touvron et al., "Going deeper with Image Transformers", ICCV 2021):
a learned per-channel scale on each residual branch of an encoder block."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit")
class LayerScale(keras.layers.Layer):
    """Multiplies its input by a learned per-channel vector (CaiT's diag(λ)), as
    DeiT III and DINOv2 put after the attention and the MLP of each block
    (timm's `ls1`/`ls2` `gamma`, transformers' `layer_scale1`/`layer_scale2`
    `lambda1`).

    Input shape: (..., hidden). Output shape: the same.
    Weight: `scale` (hidden,), initialised to `init_value`.

    Args:
        init_value: the initial value of every channel's scale (1e-5 for DINOv2
            and ViT-S/B DeiT III, 1e-6 for the larger DeiT III).
    """

    def __init__(self, init_value=1e-5, **kwargs):
        super().__init__(**kwargs)
        self.init_value = float(init_value)

    def build(self, input_shape):
        self.scale = self.add_weight(
            name="scale",
            shape=(input_shape[-1],),
            initializer=keras.initializers.Constant(self.init_value),
        )

    def call(self, x):
        return x * ops.cast(self.scale, x.dtype)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config["init_value"] = self.init_value
        return config
