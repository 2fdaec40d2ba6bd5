"""Named ViT builders (`ViT_B16(...)`, hybrids `R50_ViT_B16(...)`) and
`build_model` from a name or a dict.

Each is a `keras_vit.factory.from_weights(weights, ...)` call with the variant's
sizes: with `weights`, the checkpoint is opened, the model built with what it
records, then loaded; without, it is `VisionTransformer(...)`. keras.applications'
arguments (input_shape, input_tensor, pooling, classes, classifier_activation)
mean the same, and an unknown keyword argument is a TypeError naming it.
"""

from keras_vit.factory import from_weights
from keras_vit.variants import HYBRID_VARIANTS, VARIANTS

_ALL_VARIANTS = {**VARIANTS, **HYBRID_VARIANTS}


def _builder(variant):
    def build(weights=None, **kwargs):
        kwargs.setdefault("name", variant.lower())
        return from_weights(weights, **{**_ALL_VARIANTS[variant], **kwargs})

    arch = _ALL_VARIANTS[variant]
    resnet = ""
    if "resnet" in arch:
        units = arch["resnet"]["num_layers"]
        resnet = (
            f"ResNet with units per stage {units}, then " if units else "ResNet stem alone, then "
        )
    build.__name__ = build.__qualname__ = variant
    build.__doc__ = (
        f"{variant}: {resnet}patch {arch['patch_size']}, hidden {arch['hidden_size']}, MLP "
        f"{arch['mlp_dim']}, {arch['num_heads']} heads, {arch['num_layers']} layers.\n\n"
        "Takes the keyword arguments of `keras_vit.VisionTransformer` (weights, "
        "image_size, num_classes, include_top, classifier, representation_size, "
        "dropout_rate, ...) and keras.applications' (input_shape, input_tensor, "
        "pooling, classes, classifier_activation). Returns a `VisionTransformer`."
    )
    return build


ViT_Ti16 = _builder("ViT_Ti16")
ViT_S16 = _builder("ViT_S16")
ViT_S32 = _builder("ViT_S32")
ViT_B8 = _builder("ViT_B8")
ViT_B16 = _builder("ViT_B16")
ViT_B32 = _builder("ViT_B32")
ViT_L16 = _builder("ViT_L16")
ViT_L32 = _builder("ViT_L32")
ViT_H14 = _builder("ViT_H14")
R50_ViT_B16 = _builder("R50_ViT_B16")
R50_ViT_L32 = _builder("R50_ViT_L32")
R26_ViT_S32 = _builder("R26_ViT_S32")
R26_ViT_B32 = _builder("R26_ViT_B32")
R_Ti16 = _builder("R_Ti16")

BUILDERS = {name: globals()[name] for name in _ALL_VARIANTS}


def build_model(spec, **overrides):
    """A model from a builder name ('ViT_B16') or a dict of VisionTransformer
    kwargs (may hold 'name' of a builder under key 'variant'); `weights` (in
    `overrides` or the dict) as `keras_vit.factory.from_weights`."""
    if isinstance(spec, str):
        if spec not in BUILDERS:
            raise ValueError(f"Unknown model {spec!r}; known: {', '.join(BUILDERS)}.")
        return BUILDERS[spec](**overrides)
    spec = dict(spec)
    variant = spec.pop("variant", None)
    if variant is not None:
        return build_model(variant, **{**spec, **overrides})
    arguments = {**spec, **overrides}
    return from_weights(arguments.pop("weights", None), **arguments)
