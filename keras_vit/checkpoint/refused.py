"""What keras_vit refuses to load from a timm or transformers checkpoint, and why.

A family's feature that keras_vit's model does not compute is refused by name
before anything is built or assigned, never approximated: loading it anyway
would give other logits than the source's. `FEATURES` is the one list
(docs/checkpoints.md shows it as a table).
"""

from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.families import ROTARY_FAMILY_OPTIONS, TIMM_ONLY_OPTIONS, unwritable_options

FEATURES = {
    "distillation token": "DeiT's distilled models add a second token and head "
    "(dist_token, head_dist); keras_vit has one class token and one head",
    "qk_norm": "norms on queries and keys other than LayerNorms in every block (an "
    "RMSNorm's weight without a bias, q_norm / k_norm in some blocks alone); keras_vit "
    "reads timm's LayerNorm q_norm and k_norm (qk_norm=True)",
    "patch dropout": "dropping patch tokens in training (patch_drop_rate); keras_vit does not",
    "attention pooling": "an attention-pooling head other than big_vision's MAP "
    "(one probe token over tokens without a class token): several latents, "
    "q/k norms or position embeddings in the pool, or global_pool='map' beside a "
    "class token",
    "position embeddings on register tokens": "register tokens that get position "
    "embeddings (timm's reg_tokens without no_embed_class); keras_vit inserts "
    "registers after the position embeddings, as DINOv2 with registers",
    "rotary position embeddings": "a rotary form other than EVA-02's and RoPE-ViT's "
    "axial, RoPE-ViT's mixed and DINOv3's (the Perception Encoder's grid offset, "
    "coordinate augmentation in the checkpoint's config, MRoPE)",
    "grouped-query attention": "fewer key/value heads than query heads (Sapiens2, "
    "num_kv_heads); keras_vit's attention has as many",
    "LayerScale on attention alone": "LayerScale on the attention branch without one on "
    "the MLP's (attn_only_layer_scale); keras_vit scales both or neither",
    "pooling": "max / avg-max / no pooling (global_pool other than 'token', 'avg' and "
    "'map'); keras_vit pools by class token, mean or MAP",
    "no final LayerNorm": "an eva.py model without a LayerNorm after the blocks; "
    "keras_vit reads timm's plain ViT with final_norm=False (final_norm=False)",
    "patch-embedding norm": "a norm inside the patch embedding other than timm's "
    "LayerNorm of epsilon 1e-6 in its plain ViT (an RMSNorm, another epsilon, or "
    "one in eva.py's layout); keras_vit reads embed_norm_layer='layernorm' "
    "(patch_embedding_norm=True)",
    "scaled norms": "extra LayerNorms inside the attention (scale_attn_norm, EVA-CLIP's "
    "attn.norm) or a gate on it; keras_vit has EVA-02's LayerNorm inside the MLP alone",
    "gated MLP": "a gated MLP in a plain timm ViT or DINOv2 (SwiGLUPacked fc1 of "
    "another width, w12 / w3; DINOv2 giant, transformers' use_swiglu_ffn); keras_vit "
    "reads the SwiGLUs of timm's eva.py (EVA-02, DINOv3) and transformers' DINOv3",
    "no learned position embedding": "a plain timm ViT without position embeddings "
    "(pos_embed other than 'learn'), or an eva.py one with neither learned nor rotary ones",
    "hybrid ResNet": "timm's hybrids (vit_*_r50_*, vit_*_r26_*) standardise "
    "kernels with sqrt(var + 1e-8) and use GroupNorm epsilon 1e-5, where "
    "keras_vit's (the authors') use std + 1e-5 and 1e-6: another computation; "
    "the authors' .npz of the same models load exactly",
    "activation": "an MLP activation other than the GELU or QuickGELU (hidden_act / act_layer)",
    "pooler activation": "a pooler activation other than tanh (pooler_act)",
    "class token and patch mean head": "Dinov2ForImageClassification's classifier "
    "on the class token concatenated with the patches' mean; keras_vit loads "
    "Dinov2Model (its head sees one pooled vector)",
    "masked image modeling decoder": "ViTForMaskedImageModeling's decoder; "
    "keras_vit loads ViTModel and ViTForImageClassification",
}


class RefusedFeatureError(CheckpointError):
    """A checkpoint of a feature keras_vit does not compute (`FEATURES`)."""


def refuse(origin, feature, evidence):
    """Raises `RefusedFeatureError` naming `origin`, the feature, what in the file
    shows it (`evidence`, e.g. a key) and why it is refused."""
    raise RefusedFeatureError(
        f"{origin}: {feature} ({evidence}) is not supported: {FEATURES[feature]}. "
        "keras_vit refuses it rather than approximate it."
    )


def check_writable(model, layout):
    """Raises CheckpointError naming the options of `model` that the writer of
    `layout` (transformers') does not write: the rotary families' and those of
    timm's plain ViT alone (`keras_vit.families`), which that layout would drop."""
    options = unwritable_options(model, ROTARY_FAMILY_OPTIONS + TIMM_ONLY_OPTIONS)
    if options:
        raise CheckpointError(
            f"{model.name}: {', '.join(options)}: writing {layout} layout of these options "
            "is not supported; save the model as a .keras file (model.save)."
        )
