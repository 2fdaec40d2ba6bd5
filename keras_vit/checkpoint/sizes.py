"""What a checkpoint's arrays tell of the model they fit, and what they cannot.

A state dict's shapes give the patch size, the width, the MLP width and the depth;
they do not give the number of heads (the attention's kernels are (D, D) whichever
way D is split), nor the LayerNorm epsilon or the activation. Those come from the
file's config where it has one; else they are inferred only where every published
model of that shape agrees (`PUBLISHED_HEADS`, and the rules in
`keras_vit.checkpoint.timm_format`, listed in docs/checkpoints.md); else the
file's metadata names them as undetermined, and `keras_vit.from_weights` asks for
them (`require_determined`) instead of building a model the source may not be.
"""

import dataclasses
import logging

from keras_vit.checkpoint.errors import CheckpointError

logger = logging.getLogger("keras_vit")

SIZE_KEYS = ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers")
# The metadata key of the arguments a file cannot tell: argument -> why (a phrase).
UNDETERMINED = "undetermined"
# The heads of timm's ViTs with a class token (timm 1.0.31's vision_transformer.py and
# deit.py: every architecture of that width with a class token has that many heads;
# DeiT and AugReg Ti/S/B/L, DeiT III, DINOv2, CLIP, MAE, BEiT-style fine-tunes ...).
PUBLISHED_HEADS = {
    192: 3,
    256: 4,
    384: 6,
    512: 8,
    640: 10,
    768: 12,
    896: 14,
    1024: 16,
    1152: 16,
    1280: 16,
    1408: 16,
    1536: 24,
    1664: 16,
}


# Without a class token, the widths where every such timm architecture agrees; at 768,
# 1024 and 1536 they do not (768: SigLIP's 12 heads, vit_base_patch16_gap_224's 16).
NO_CLASS_TOKEN_HEADS = {
    96: 3,
    256: 4,
    320: 5,
    512: 8,
    640: 10,
    832: 13,
    896: 14,
    1152: 16,
    1280: 16,
    1408: 16,
    2048: 16,
    3072: 24,
}
# ... and there, what a timm architecture named in config.json has: every one of those
# widths (SigLIP's, the reg4_gap models') but the named exceptions (aimv2_* have keys of
# their own and are not read).
NAMED_NO_CLASS_TOKEN_HEADS = {768: 12, 1024: 16, 1536: 16}
NAMED_EXCEPTIONS = {"vit_base_patch16_gap_224": 16}


def published_heads(hidden_size, class_token, architecture=None):
    """The heads every published timm ViT of this width (with a class token, or
    without) has, or that timm's `architecture` (config.json's name, without its
    '.tag') has; None where they disagree or none is published."""
    hidden = int(hidden_size)
    if class_token:
        return PUBLISHED_HEADS.get(hidden)
    name = str(architecture or "").partition(".")[0]
    if name in NAMED_EXCEPTIONS:
        return NAMED_EXCEPTIONS[name]
    if name and hidden in NAMED_NO_CLASS_TOKEN_HEADS:
        return NAMED_NO_CLASS_TOKEN_HEADS[hidden]
    return NO_CLASS_TOKEN_HEADS.get(hidden)


def given_size(arch, key):
    """The size `key` of `arch` (`keras_vit.checkpoint.source.architecture`) where its
    caller gave it (its 'given' keys; all of them where it has none), else None: what
    a file's recorded sizes are checked against."""
    if not arch or key not in arch.get("given", arch):
        return None
    return arch.get(key)


def require_determined(origin, metadata, arguments):
    """Raises CheckpointError (one line) for the first argument the file cannot tell
    (`metadata[UNDETERMINED]`) that `arguments` (the caller's, None: not given) does
    not give."""
    for key, why in (metadata.get(UNDETERMINED) or {}).items():
        if arguments.get(key) is None:
            raise CheckpointError(f"{origin} does not say {key}: {why}; pass {key}=...")


def determined(opened):
    """`opened` (a `Source`) without its undetermined arguments, once its caller
    has given them (`require_determined`): nothing left to warn of when it loads."""
    if UNDETERMINED not in opened.metadata:
        return opened
    metadata = {k: v for k, v in opened.metadata.items() if k != UNDETERMINED}
    return dataclasses.replace(opened, metadata=metadata)


def transformers_sizes(config, patch, num_heads):
    """The sizes (`SIZE_KEYS`) of a transformers config.json (`config`), its patch
    (height, width) and heads as the caller read them."""
    return {
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "hidden_size": int(config["hidden_size"]),
        "mlp_dim": int(config["intermediate_size"]),
        "num_heads": num_heads,
        "num_layers": int(config["num_hidden_layers"]),
    }


def check_fits(origin, sizes, model, inferred=None):
    """Raises CheckpointError naming every size (`SIZE_KEYS`) of the file (`sizes`:
    key -> value, None where the file does not say) that the built `model` does not
    have, with the arguments that build one that fits; `inferred` (key -> value: what
    every published model of the file's shape has, `published_heads`) joins them
    there. Where only an inferred size differs, the model's stands (its builder chose
    it), with a warning."""
    inferred = {k: v for k, v in (inferred or {}).items() if v is not None}

    def different(values):
        return {
            key: value
            for key, value in values.items()
            if value is not None and _normal(getattr(model, key, None)) != _normal(value)
        }

    differ = different(sizes)
    if not differ:
        for key, value in different(inferred).items():
            logger.warning(
                "%s: every published model of the shape of %s has %s=%r; the model has %r.",
                model.name,
                origin,
                key,
                value,
                getattr(model, key, None),
            )
        return
    differ = {**differ, **different(inferred)}
    theirs = ", ".join(f"{key}={_shown(value)}" for key, value in differ.items())
    ours = ", ".join(f"{key}={_shown(getattr(model, key, None))}" for key in differ)
    flags = " ".join(
        f"--config.model_overrides.{key}={_shown(value)}" for key, value in differ.items()
    )
    raise CheckpointError(
        f"{origin} has {theirs}; the model '{model.name}' has {ours}: build it with the "
        f"file's (keras_vit.from_weights reads them from it; a trainer config: {flags})."
    )


def _normal(value):
    """A patch size as an int where square; other values as they are."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and value[0] == value[1]:
        return int(value[0])
    return value


def _shown(value):
    value = _normal(value)
    return list(value) if isinstance(value, tuple) else value
