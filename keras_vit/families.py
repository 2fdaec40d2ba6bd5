"""The options on which the families of published ViTs compute differently.

The authors' checkpoints, timm's and Hugging Face transformers' are the same
architecture computed with a few differences. Each difference is a
`VisionTransformer` argument of this name, kept in its config, and a key of a
checkpoint's metadata (`keras_vit.checkpoint.metadata`) that fills it where the
caller leaves it open; `FAMILY_DEFAULTS` holds the authors' (official) value of
each, used where neither says:

    approximate_gelu    the MLPs' GELU: tanh form (authors) or exact erf (timm,
                        transformers 'gelu')
    layer_norm_epsilon  1e-6 (authors, timm) or transformers' layer_norm_eps
                        (1e-12 by default)
    fc_norm             the final LayerNorm after pooling instead of before
                        (timm's fc_norm, its default for average pooling)
"""

from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON

FAMILY_DEFAULTS = {
    "approximate_gelu": True,
    "layer_norm_epsilon": LAYER_NORM_EPSILON,
    "fc_norm": False,
}
FAMILY_OPTIONS = tuple(FAMILY_DEFAULTS)
