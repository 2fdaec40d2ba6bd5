"""The options on which the families of published ViTs compute differently.

The authors' checkpoints, timm's and Hugging Face transformers' are the same
architecture computed with a few differences. Each difference is a
`VisionTransformer` argument of this name, kept in its config, and a key of a
checkpoint's metadata (`keras_vit.checkpoint.metadata`) that fills it where the
caller leaves it open: the options `keras_vit.options` declares with
`family=True`, each with its docstring entry there (the exact GELU of timm and
transformers, their LayerNorm epsilon, fc_norm, LayerScale, registers, the class
token's position embedding, CLIP's pre-norm, QuickGELU and bias-free patch
embedding, the rotary families' options). `FAMILY_DEFAULTS` holds the authors'
(official) value of each, used where neither says.

The classifier 'map' (SigLIP's multi-head attention pooling) is `classifier`'s,
which a checkpoint fills as it fills 'token' and 'gap'.
"""

from keras_vit.options import ALWAYS, OPTIONS, recorded

_FAMILY = tuple(option for option in OPTIONS if option.family)
FAMILY_DEFAULTS = {option.name: option.official for option in _FAMILY}
# The options a model config always records (those older than the others, which it
# records only where they differ from the authors').
ALWAYS_RECORDED = tuple(option.name for option in _FAMILY if option.record == ALWAYS)
# The options whose value is True or False.
BOOLEAN_OPTIONS = tuple(option.name for option in _FAMILY if option.kind is bool)
FAMILY_OPTIONS = tuple(FAMILY_DEFAULTS)


def recorded_options(options):
    """The family options (a mapping, missing keys the authors' values) as a model
    config records them: `ALWAYS_RECORDED`, then the others that differ."""
    values = {option.name: options.get(option.name, option.official) for option in _FAMILY}
    return {
        option.name: values[option.name]
        for option in _FAMILY
        if recorded(option, values[option.name])
    }


# The options of the rotary families (EVA-02, RoPE-ViT, DINOv3): timm's eva.py layout
# writes them (`keras_vit.checkpoint.timm_eva`), timm's plain ViT and transformers' do not.
ROTARY_FAMILY_OPTIONS = ("absolute_position_embedding", "rope", "gated_mlp", "mlp_norm")
# The options timm's plain ViT layout alone writes (`keras_vit.checkpoint.timm_format`).
PLAIN_TIMM_ONLY_OPTIONS = ("patch_embedding_norm", "final_norm")
# The options timm's layouts write (plain and eva.py: qk_norm) and transformers' do not.
TIMM_ONLY_OPTIONS = ("qk_norm", *PLAIN_TIMM_ONLY_OPTIONS)


def unwritable_options(model, names=ROTARY_FAMILY_OPTIONS):
    """['rope={...}', ...]: the options of `names` that `model` sets otherwise than
    the authors' model (those a layout's writer must refuse or route)."""
    return [
        f"{key}={getattr(model, key)!r}"
        for key in names
        if getattr(model, key, FAMILY_DEFAULTS[key]) != FAMILY_DEFAULTS[key]
    ]
