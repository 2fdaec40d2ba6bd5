"""Hybrid ResNet + ViT models (paper §3.1 "Hybrid Architecture", §4.1).

The input sequence comes from a BiT-style ResNet's feature map (weight-
standardised convolutions, GroupNorm) instead of raw image patches: the patch
embedding cuts the feature map into patches (1x1 for the published hybrids).

    import keras_vit
    model = keras_vit.R50_ViT_B16(weights="imagenet21k+imagenet2012")  # 384 px
    features = model.feature_extractor(blocks=(-1,), stages=True)  # ResNet + encoder maps
    # {"stem": (B, 96, 96, 64), "stage1": ..., "stage3": (B, 24, 24, 1024), "block12": ...}

Named builders (same keyword arguments as the plain ViTs): `R50_ViT_B16`
(units 3, 4, 9), `R50_ViT_L32` (3, 4, 6, 3), `R26_ViT_S32` and `R26_ViT_B32`
(2, 2, 2, 2), `R_Ti16` (stem only, 8x8 patches); `HybridViT` for any ResNet
spec and Transformer size.
"""

import keras

from keras_vit.builders import R26_ViT_B32, R26_ViT_S32, R50_ViT_B16, R50_ViT_L32, R_Ti16
from keras_vit.factory import from_weights
from keras_vit.variants import SIZES
from keras_vit.vision_transformer import VisionTransformer


def HybridViT(resnet, size="B", patch_size=1, weights=None, **kwargs):
    """A ResNet + ViT of any ResNet spec and named Transformer size.

    Args:
        resnet: units per stage, e.g. (3, 4, 6, 3) (`()` for the stem alone), or
            {'num_layers': ..., 'width_factor': ...} as the official config.
        size: 'Ti', 'S', 'B', 'L' or 'H' (hidden size, MLP, heads, layers of
            the paper's Table 1).
        patch_size: patch side on the ResNet feature map.
        weights: as `keras_vit.from_weights` (None: none).
        **kwargs: as `keras_vit.VisionTransformer` (image_size,
            num_classes, include_top, classifier, representation_size, ...,
            and keras.applications' input_shape, input_tensor, pooling, classes,
            classifier_activation).

    Returns:
        A `VisionTransformer`; e.g. `HybridViT((3, 4, 6, 3), "B")` is R50+ViT-B/32.
    """
    if size not in SIZES:
        raise ValueError(f"Unknown size {size!r}; known: {', '.join(SIZES)}.")
    kwargs.setdefault("name", "hybrid_vit")
    return from_weights(weights, resnet=resnet, patch_size=patch_size, **{**SIZES[size], **kwargs})


def feature_extractor(model, stages=False):
    """The ResNet part of a hybrid alone (BiT's backbone without its head), as a
    `keras.Model` sharing `model`'s weights.

    A thin alias of `model.feature_extractor(blocks=(), stages=...)`, kept for
    code written before that method, in its own output forms: one map or a
    list rather than a dict. New code: `model.feature_extractor`, which also
    gives the encoder blocks' token maps from the same call.

    Args:
        model: a hybrid `VisionTransformer` (built with `resnet=...`).
        stages: False for the final feature map only; True for every stage's
            output [stem, block1, ..., blockS] (e.g. for a feature pyramid).

    Returns:
        A model mapping images (B, H, W, C) in [-1, 1] to the feature map
        (B, h, w, C), h = H / stride for multiples of the stride (ceil at each
        stride-2 step otherwise); C = 64 * width_factor for the stem,
        256 * 2**s * width_factor after stage s + 1. With `stages=True`, a list.
    Raises:
        ValueError: `model` has no ResNet.
    """
    if not isinstance(model, VisionTransformer) or model.resnet is None:
        raise ValueError(f"{model.name} is not a hybrid model: it has no ResNet.")
    extractor = model.feature_extractor(blocks=(), stages=True if stages else -1)
    maps = list(extractor.output.values())  # stem, block1, ... in order
    return keras.Model(extractor.input, maps if stages else maps[-1], name=f"{model.name}_resnet")


__all__ = [
    "HybridViT",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "R_Ti16",
    "feature_extractor",
]
