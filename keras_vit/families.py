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
                        (timm's fc_norm, its default for average pooling;
                        transformers' CLIP post_layernorm on the class token)
    layer_scale_init    LayerScale on both residual branches of each block,
                        with this initial value (DeiT III, DINOv2); None: none
    num_registers       register tokens after the class token (DINOv2 with
                        registers), dropped from features and pooling
    position_embedding_for_class_token
                        whether the class token gets a position embedding (the
                        authors', DINOv2) or the patches alone (DeiT III, timm's
                        no_embed_class)
    pre_norm            a LayerNorm before the first block (CLIP's ln_pre)
    quick_gelu          the MLPs' activation is OpenAI CLIP's x * sigmoid(1.702 x)
    patch_embedding_bias
                        whether the patch embedding has a bias (CLIP's has none)
    absolute_position_embedding
                        whether learned position embeddings are added (DINOv3's
                        and RoPE-ViT's positions are rotary alone)
    rope                rotary position embeddings in the attention: None, or a
                        dict (`keras_vit.layers.rotary.rope_spec`: 'axial' for
                        EVA-02 and RoPE-ViT-Axial, 'mixed' for RoPE-ViT-Mixed,
                        'dinov3')
    qk_norm             a LayerNorm on each head's queries and keys
    gated_mlp           SwiGLU MLPs: SiLU(gate) * value (EVA-02, DINOv3's
                        larger models)
    mlp_norm            a LayerNorm inside each MLP, before its second Dense
                        (EVA-02 base and large)

The classifier 'map' (SigLIP's multi-head attention pooling) is `classifier`'s,
which a checkpoint fills as it fills 'token' and 'gap'.
"""

from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON

FAMILY_DEFAULTS = {
    "approximate_gelu": True,
    "layer_norm_epsilon": LAYER_NORM_EPSILON,
    "fc_norm": False,
    "layer_scale_init": None,
    "num_registers": 0,
    "position_embedding_for_class_token": True,
    "pre_norm": False,
    "quick_gelu": False,
    "patch_embedding_bias": True,
    "absolute_position_embedding": True,
    "rope": None,
    "qk_norm": False,
    "gated_mlp": False,
    "mlp_norm": False,
}
# The options a model config always records (those older than the others, which it
# records only where they differ from the authors').
ALWAYS_RECORDED = ("approximate_gelu", "layer_norm_epsilon", "fc_norm")
# The options whose value is True or False.
BOOLEAN_OPTIONS = (
    "approximate_gelu",
    "fc_norm",
    "position_embedding_for_class_token",
    "pre_norm",
    "quick_gelu",
    "patch_embedding_bias",
    "absolute_position_embedding",
    "qk_norm",
    "gated_mlp",
    "mlp_norm",
)
FAMILY_OPTIONS = tuple(FAMILY_DEFAULTS)


def recorded_options(options):
    """The family options (a mapping, missing keys the authors' values) as a model
    config records them: `ALWAYS_RECORDED`, then the others that differ."""
    values = {key: options.get(key, default) for key, default in FAMILY_DEFAULTS.items()}
    return {
        key: value
        for key, value in values.items()
        if key in ALWAYS_RECORDED or value != FAMILY_DEFAULTS[key]
    }


# The options of the rotary families (EVA-02, RoPE-ViT, DINOv3), which keras_vit reads
# but does not write back to timm's or transformers' layouts.
ROTARY_FAMILY_OPTIONS = ("absolute_position_embedding", "rope", "qk_norm", "gated_mlp", "mlp_norm")


def unwritable_options(model):
    """['rope={...}', ...]: the options of `ROTARY_FAMILY_OPTIONS` that `model` sets
    (no writer of timm's or transformers' layouts takes them)."""
    return [
        f"{key}={getattr(model, key)!r}"
        for key in ROTARY_FAMILY_OPTIONS
        if getattr(model, key, FAMILY_DEFAULTS[key]) != FAMILY_DEFAULTS[key]
    ]
