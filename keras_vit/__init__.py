"""keras_vit: the Vision Transformer (Dosovitskiy et al., ICLR 2021) in Keras 3.

    import keras_vit
    model = keras_vit.ViT_B16(weights="imagenet21k+imagenet2012")
    logits = model(keras_vit.preprocess_input(images))

Construction builds, loading is a step of its own: `ViT_B16(weights=...)`,
`build_model(..., weights=...)` and `from_weights(weights, **arguments)` open
the checkpoint, build the model with what it records, then load it;
`load_weights(model, weights)` loads into a model already built.

Runs under the TensorFlow and JAX backends (keras.ops only).
"""

import logging as _logging

from keras_vit import factory, hybrid, layers
from keras_vit.builders import (
    BUILDERS,
    CLIP_B16,
    CLIP_B32,
    CLIP_L14,
    EVA02_B14,
    EVA02_L14,
    EVA02_S14,
    DeiT3_B16,
    DeiT3_L16,
    DeiT3_S16,
    DINOv2_B14,
    DINOv2_B14_reg,
    DINOv2_L14,
    DINOv2_L14_reg,
    DINOv2_S14,
    DINOv2_S14_reg,
    DINOv3_B16,
    DINOv3_L16,
    DINOv3_S16,
    EVA02_Ti14,
    R26_ViT_B32,
    R26_ViT_S32,
    R50_ViT_B16,
    R50_ViT_L32,
    R_Ti16,
    RoPE_Mixed_ViT_B16,
    RoPE_Mixed_ViT_L16,
    RoPE_Mixed_ViT_S16,
    RoPE_ViT_B16,
    RoPE_ViT_L16,
    RoPE_ViT_S16,
    SigLIP_B16,
    SigLIP_L16,
    SigLIP_So400m14,
    ViT_B8,
    ViT_B16,
    ViT_B32,
    ViT_H14,
    ViT_L16,
    ViT_L32,
    ViT_S16,
    ViT_S32,
    ViT_Ti16,
    build_model,
)
from keras_vit.checkpoint import CheckpointError, load_weights, save_checkpoint
from keras_vit.factory import from_weights
from keras_vit.hybrid import HybridViT
from keras_vit.preprocessing import decode_predictions, preprocess_input
from keras_vit.variants import HYBRID_VARIANTS, VARIANTS
from keras_vit.vision_transformer import VisionTransformer

__version__ = "0.1.0"


class _DefaultHandler(_logging.StreamHandler):
    """Shows keras_vit's INFO lines (position-embedding resizes, fresh heads) while
    the application has configured no logging; once the root logger has handlers
    (absl, logging.basicConfig, ...), records reach them by propagation instead."""

    def emit(self, record):
        if not _logging.getLogger().handlers:
            super().emit(record)


_logger = _logging.getLogger("keras_vit")
if not _logger.handlers:
    _handler = _DefaultHandler()
    _handler.setFormatter(_logging.Formatter("keras_vit: %(message)s"))
    _logger.addHandler(_handler)
    _logger.setLevel(_logging.INFO)

__all__ = [
    "BUILDERS",
    "CLIP_B16",
    "CLIP_B32",
    "CLIP_L14",
    "DINOv3_S16",
    "DINOv3_B16",
    "DINOv3_L16",
    "EVA02_Ti14",
    "EVA02_S14",
    "EVA02_B14",
    "EVA02_L14",
    "RoPE_ViT_S16",
    "RoPE_ViT_B16",
    "RoPE_ViT_L16",
    "RoPE_Mixed_ViT_S16",
    "RoPE_Mixed_ViT_B16",
    "RoPE_Mixed_ViT_L16",
    "DINOv2_B14",
    "DINOv2_B14_reg",
    "DINOv2_L14",
    "DINOv2_L14_reg",
    "DINOv2_S14",
    "DINOv2_S14_reg",
    "DeiT3_B16",
    "DeiT3_L16",
    "DeiT3_S16",
    "SigLIP_B16",
    "SigLIP_L16",
    "SigLIP_So400m14",
    "CheckpointError",
    "HYBRID_VARIANTS",
    "HybridViT",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "R_Ti16",
    "VARIANTS",
    "ViT_B8",
    "ViT_B16",
    "ViT_B32",
    "ViT_H14",
    "ViT_L16",
    "ViT_L32",
    "ViT_S16",
    "ViT_S32",
    "ViT_Ti16",
    "VisionTransformer",
    "build_model",
    "decode_predictions",
    "factory",
    "from_weights",
    "hybrid",
    "layers",
    "load_weights",
    "preprocess_input",
    "save_checkpoint",
]
