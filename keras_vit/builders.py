"""Named ViT builders (`ViT_B16(...)`, hybrids `R50_ViT_B16(...)`) and
`build_model` from a name or a dict.

Each is a `keras_vit.factory.from_weights(weights, ...)` call with the variant's
sizes: with `weights`, the checkpoint is opened, the model built with what it
records, then loaded; without, it is `VisionTransformer(...)`. keras.applications'
arguments (input_shape, input_tensor, pooling, classes, classifier_activation)
mean the same, and an unknown keyword argument is a TypeError naming it.
"""

from keras_vit.checkpoint import hub_names
from keras_vit.factory import from_weights
from keras_vit.variants import HYBRID_VARIANTS, VARIANTS

_SIZES = {  # hidden, MLP, heads, layers
    "S": (384, 1536, 6, 12),
    "B": (768, 3072, 12, 12),
    "L": (1024, 4096, 16, 24),
    "So400m": (1152, 4304, 16, 27),
}


def _sized(size, patch):
    hidden, mlp, heads, layers = _SIZES[size]
    return dict(
        patch_size=patch, hidden_size=hidden, mlp_dim=mlp, num_heads=heads, num_layers=layers
    )


_DEIT3 = dict(position_embedding_for_class_token=False, approximate_gelu=False)
_DINOV2 = dict(layer_scale_init=1e-5, approximate_gelu=False)
_SIGLIP = dict(classifier="map")  # big_vision's tanh GELU, LayerNorm epsilon 1e-6
_CLIP = dict(  # OpenAI's: QuickGELU
    classifier="token",
    pre_norm=True,
    patch_embedding_bias=False,
    layer_norm_epsilon=1e-5,
    quick_gelu=True,
)
_DINOV3 = dict(  # timm's layout: the mean of the patches, 4 storage tokens, RoPE alone
    rope="dinov3",
    absolute_position_embedding=False,
    num_registers=4,
    layer_scale_init=1e-5,
    layer_norm_epsilon=1e-5,
    approximate_gelu=False,
    classifier="token_gap",
)
_EVA02 = dict(  # learned position embeddings and RoPE on a 16 x 16 reference grid
    rope={"kind": "axial", "reference_grid": (16, 16)},
    gated_mlp=True,
    approximate_gelu=False,
    classifier="token_gap",
    fc_norm=True,
)
_ROPE_VIT = dict(  # Heo et al.'s RoPE-ViT: RoPE alone, class token
    absolute_position_embedding=False,
    layer_scale_init=1e-5,
    approximate_gelu=False,
)
_ROPE_AXIAL = {"kind": "axial", "temperature": 100.0, "grid_indexing": "xy"}


def _eva02(hidden, heads, layers, inner_norm):
    """EVA-02's sizes: a SwiGLU of int(hidden * 8 / 3) (timm's mlp_ratio 4 * 2 / 3)."""
    sizes = dict(
        patch_size=14,
        hidden_size=hidden,
        mlp_dim=int(hidden * (4 * 2 / 3)),
        num_heads=heads,
        num_layers=layers,
    )
    return sizes, {**_EVA02, "mlp_norm": True} if inner_norm else _EVA02


# The families' variants: sizes, then the options of their family (keras_vit.families).
# With `weights`, the file's options win over these (a LAION CLIP's GELU, timm's
# DINOv2-with-registers layout, ...): only the sizes are given.
FAMILY_VARIANTS = {
    "DeiT3_S16": ({**_sized("S", 16)}, {**_DEIT3, "layer_scale_init": 1e-6}),
    "DeiT3_B16": ({**_sized("B", 16)}, {**_DEIT3, "layer_scale_init": 1e-6}),
    "DeiT3_L16": ({**_sized("L", 16)}, {**_DEIT3, "layer_scale_init": 1e-6}),
    "DINOv2_S14": (_sized("S", 14), _DINOV2),
    "DINOv2_B14": (_sized("B", 14), _DINOV2),
    "DINOv2_L14": (_sized("L", 14), _DINOV2),
    "DINOv2_S14_reg": (_sized("S", 14), {**_DINOV2, "num_registers": 4}),
    "DINOv2_B14_reg": (_sized("B", 14), {**_DINOV2, "num_registers": 4}),
    "DINOv2_L14_reg": (_sized("L", 14), {**_DINOV2, "num_registers": 4}),
    "SigLIP_B16": (_sized("B", 16), _SIGLIP),
    "SigLIP_L16": (_sized("L", 16), _SIGLIP),
    "SigLIP_So400m14": (_sized("So400m", 14), _SIGLIP),
    "CLIP_B16": (_sized("B", 16), _CLIP),
    "CLIP_B32": (_sized("B", 32), _CLIP),
    "CLIP_L14": (_sized("L", 14), _CLIP),
    "DINOv3_S16": (_sized("S", 16), _DINOV3),
    "DINOv3_B16": (_sized("B", 16), _DINOV3),
    "DINOv3_L16": (_sized("L", 16), _DINOV3),
    "EVA02_Ti14": _eva02(192, 3, 12, inner_norm=False),
    "EVA02_S14": _eva02(384, 6, 12, inner_norm=False),
    "EVA02_B14": _eva02(768, 12, 12, inner_norm=True),
    "EVA02_L14": _eva02(1024, 16, 24, inner_norm=True),
    "RoPE_ViT_S16": (_sized("S", 16), {**_ROPE_VIT, "rope": _ROPE_AXIAL}),
    "RoPE_ViT_B16": (_sized("B", 16), {**_ROPE_VIT, "rope": _ROPE_AXIAL}),
    "RoPE_ViT_L16": (_sized("L", 16), {**_ROPE_VIT, "rope": _ROPE_AXIAL}),
    "RoPE_Mixed_ViT_S16": (_sized("S", 16), {**_ROPE_VIT, "rope": "mixed"}),
    "RoPE_Mixed_ViT_B16": (_sized("B", 16), {**_ROPE_VIT, "rope": "mixed"}),
    "RoPE_Mixed_ViT_L16": (_sized("L", 16), {**_ROPE_VIT, "rope": "mixed"}),
}

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


def _family_builder(variant):
    sizes, options = FAMILY_VARIANTS[variant]

    def build(weights=None, **kwargs):
        kwargs.setdefault("name", variant.lower())
        if weights is None:
            return from_weights(None, **{**sizes, **options, **kwargs})
        published = hub_names.resolve(variant, weights)  # 'lvd142m', 'openai', ...
        if published is not None:
            weights, kwargs = published.weights, {**dict(published.arguments), **kwargs}
        return from_weights(weights, **{**sizes, **kwargs})

    build.__name__ = build.__qualname__ = variant
    shown = ", ".join(f"{key}={value!r}" for key, value in options.items())
    build.__doc__ = (
        f"{variant}: patch {sizes['patch_size']}, hidden {sizes['hidden_size']}, MLP "
        f"{sizes['mlp_dim']}, {sizes['num_heads']} heads, {sizes['num_layers']} layers; "
        f"its family's options {shown} (without `weights`; with them, the file's, "
        "`keras_vit.families`).\n\n"
        f"`weights`: a published name ({', '.join(hub_names.names_for(variant))}: its timm "
        "repository on the Hugging Face Hub, `keras_vit.checkpoint.hub_names`), or any "
        "checkpoint `keras_vit.from_weights` reads.\n\n"
        "Takes the keyword arguments of `keras_vit.VisionTransformer` and keras.applications' "
        "(docs/models.md lists the sources each loads). Returns a `VisionTransformer`."
    )
    return build


DeiT3_S16 = _family_builder("DeiT3_S16")
DeiT3_B16 = _family_builder("DeiT3_B16")
DeiT3_L16 = _family_builder("DeiT3_L16")
DINOv2_S14 = _family_builder("DINOv2_S14")
DINOv2_B14 = _family_builder("DINOv2_B14")
DINOv2_L14 = _family_builder("DINOv2_L14")
DINOv2_S14_reg = _family_builder("DINOv2_S14_reg")
DINOv2_B14_reg = _family_builder("DINOv2_B14_reg")
DINOv2_L14_reg = _family_builder("DINOv2_L14_reg")
SigLIP_B16 = _family_builder("SigLIP_B16")
SigLIP_L16 = _family_builder("SigLIP_L16")
SigLIP_So400m14 = _family_builder("SigLIP_So400m14")
CLIP_B16 = _family_builder("CLIP_B16")
CLIP_B32 = _family_builder("CLIP_B32")
CLIP_L14 = _family_builder("CLIP_L14")
DINOv3_S16 = _family_builder("DINOv3_S16")
DINOv3_B16 = _family_builder("DINOv3_B16")
DINOv3_L16 = _family_builder("DINOv3_L16")
EVA02_Ti14 = _family_builder("EVA02_Ti14")
EVA02_S14 = _family_builder("EVA02_S14")
EVA02_B14 = _family_builder("EVA02_B14")
EVA02_L14 = _family_builder("EVA02_L14")
RoPE_ViT_S16 = _family_builder("RoPE_ViT_S16")
RoPE_ViT_B16 = _family_builder("RoPE_ViT_B16")
RoPE_ViT_L16 = _family_builder("RoPE_ViT_L16")
RoPE_Mixed_ViT_S16 = _family_builder("RoPE_Mixed_ViT_S16")
RoPE_Mixed_ViT_B16 = _family_builder("RoPE_Mixed_ViT_B16")
RoPE_Mixed_ViT_L16 = _family_builder("RoPE_Mixed_ViT_L16")

BUILDERS = {name: globals()[name] for name in (*_ALL_VARIANTS, *FAMILY_VARIANTS)}


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
