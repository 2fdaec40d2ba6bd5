"""What a checkpoint records about the model built from it.

A `Source`'s `metadata` (keras_vit.checkpoint.source) is a dict of what the file
says, where it says it:

    classifier           'token' (a class token), 'gap', 'map' or 'token_gap'
                         (a class token the mean pooling leaves out)
    channels             input channels of the kernel that sees the image
    representation_size  the pre_logits width, None for none
    num_classes          the head's width (absent for a headless model)
    include_top          False where the source states that it has no head: its
                         arrays have none (a state dict without 'head' keys, the
                         official 'head/kernel'), its config says so (a Keras
                         config's include_top=False, timm's num_classes=0, a
                         transformers *Model without a classifier); absent
                         otherwise, and where a file says nothing of its model (a
                         .weights.h5 alone). `keras_vit.from_weights` builds such
                         a source headless unless its caller asks for a head
                         (include_top=True, num_classes= or classes=)
    image_size           the resolution of the position embeddings (an int for
                         a square official file, (height, width) from a config)
    grid_size            (rows, cols) of the position embeddings, where the file
                         says it exactly (a Keras config, a timm or transformers
                         config); an official file's grid is square
    approximate_gelu, layer_norm_epsilon, fc_norm
                         the options of the file's family (`keras_vit.families`),
                         where it says them (a Keras config, a timm or
                         transformers file: `keras_vit.checkpoint.interop`)
    posemb_resize        how the code that wrote it resizes position embeddings
                         (`keras_vit.layers.position_embedding.RESIZE_METHODS`;
                         absent: 'official')
    sizes                patch_size, hidden_size, mlp_dim, num_heads, num_layers
                         where the arrays' shapes give them (num_heads None where
                         they do not: `keras_vit.checkpoint.sizes`)
    undetermined         argument -> why, for what the file does not say and the
                         caller must (`keras_vit.checkpoint.sizes`)
    preprocessing        the input normalisation, where it is not the authors'
                         (`keras_vit.preprocessing`: a Keras config, timm's
                         pretrained_cfg mean/std, transformers'
                         preprocessor_config.json)

An official file records them in its arrays (`from_params`); a Keras file in the
model's config (`from_config`).
"""

import logging

import numpy as np

from keras_vit.families import FAMILY_OPTIONS
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.resnet import resnet_spec, resnet_stride

logger = logging.getLogger("keras_vit")

POSEMB = "Transformer/posembed_input/pos_embedding"


def input_kernel(params):
    """The official name of the kernel that sees the image's channels: a hybrid's
    ResNet stem where the arrays have one, else the patch embedding's."""
    return "conv_root/kernel" if "conv_root/kernel" in params else "embedding/kernel"


def from_params(params, arch=None, entry=None, name=None):
    """What official arrays (name -> array) imply for the model built from them.

    Args:
        params: the arrays under official names.
        arch: the architecture they go to (`keras_vit.checkpoint.source.architecture`):
            its patch size and a hybrid's `stride` turn the position embedding's
            grid into a resolution; None: no `image_size`.
        entry: the registry Entry the file was downloaded for (`name`: what the
            user asked for); its resolution and classes stand in where the
            arrays do not say, and where they disagree the arrays win (one log
            line).
    Returns:
        the metadata dict (module docstring): classifier, channels,
        representation_size, num_classes and image_size where the arrays say.
    """
    if "MAPHead_0/probe" in params:  # big_vision's attention pooling (SigLIP)
        meta = {"classifier": "map"}
    else:
        meta = {"classifier": "token" if "cls" in params else "gap"}
    stem = params.get(input_kernel(params))
    if stem is not None and stem.ndim == 4:
        meta["channels"] = int(stem.shape[2])
    meta["representation_size"] = (
        int(params["pre_logits/kernel"].shape[-1]) if "pre_logits/kernel" in params else None
    )
    if "head/kernel" in params:
        meta["num_classes"] = int(params["head/kernel"].shape[-1])
    # A registry name or URL is its variant's file (`entry`): its sizes are the name's.
    sizes = official_sizes(params) if entry is None else None
    if sizes is not None:
        meta["sizes"] = sizes
    posemb = params.get(POSEMB)
    patch = (arch or {}).get("patch_size")
    if sizes is not None and "given" in (arch or {}) and "patch_size" not in arch["given"]:
        patch = sizes["patch_size"]  # the model will take the file's
    if posemb is not None and posemb.ndim == 3 and "cls" in params:
        rows = posemb.shape[1]
        if is_square(rows) and not is_square(rows - 1):  # big_vision's: patches alone
            meta["position_embedding_for_class_token"] = False
    for_cls = "cls" in params and meta.get("position_embedding_for_class_token", True)
    if posemb is not None and posemb.ndim == 3 and isinstance(patch, int):
        grid_tokens = posemb.shape[1] - (1 if for_cls else 0)
        side = int(round(np.sqrt(grid_tokens)))
        if side * side == grid_tokens:
            meta["image_size"] = side * patch * arch.get("stride", 1)
    for key in ("image_size", "num_classes") if entry is not None else ():
        expected = getattr(entry, key)
        if expected is None:
            continue
        if key not in meta:
            meta[key] = expected
        elif meta[key] != expected:
            logger.info(
                "%s: the file has %s %d where its name says %d; the file's is used.",
                name or entry.url,
                key,
                meta[key],
                expected,
            )
    return stating_the_top(meta)


def stating_the_top(meta):
    """`meta`, of a source that records its whole model, with 'include_top': False
    where it has no head (no 'num_classes'). Returns `meta`."""
    if "num_classes" not in meta:
        meta["include_top"] = False
    return meta


def official_sizes(params):
    """The sizes (patch_size, hidden_size, mlp_dim, num_heads, num_layers) a plain
    ViT's official arrays have: the patch embedding's kernel (P, P, C, D), the MLP's
    (D, mlp), the attention's query kernel (D, heads, head_dim), the blocks. None for
    a hybrid's (its ResNet is not read from them) or arrays without those keys."""
    block = "Transformer/encoderblock_0/"
    kernel = params.get("embedding/kernel")
    query = params.get(block + "MultiHeadDotProductAttention_1/query/kernel")
    mlp = params.get(block + "MlpBlock_3/Dense_0/kernel")
    if "conv_root/kernel" in params or any(
        a is None or np.ndim(a) != n for a, n in ((kernel, 4), (query, 3), (mlp, 2))
    ):
        return None
    layers = {k.split("/")[1] for k in params if k.startswith("Transformer/encoderblock_")}
    height, width = int(kernel.shape[0]), int(kernel.shape[1])
    return {
        "patch_size": height if height == width else [height, width],
        "hidden_size": int(kernel.shape[-1]),
        "mlp_dim": int(mlp.shape[-1]),
        "num_heads": int(query.shape[1]),
        "num_layers": len(layers),
    }


def from_config(config):
    """What a keras_vit model's config (`VisionTransformer.get_config`, as JSON)
    records: everything `from_params` reads from arrays, the exact grid and the
    family options.

    Raises:
        ValueError: a config whose image_size, patch_size or resnet is malformed
            (named).
    """
    meta = {key: config.get(key) for key in ("num_classes", "representation_size", "classifier")}
    meta.update({key: config[key] for key in FAMILY_OPTIONS if config.get(key) is not None})
    if config.get("preprocessing") is not None:
        meta["preprocessing"] = config["preprocessing"]
    meta["channels"] = int(config.get("channels") or 3)
    if not config.get("include_top", True):
        meta.pop("num_classes")
    stating_the_top(meta)
    if config.get("image_size") is not None:
        meta["image_size"] = to_pair(config["image_size"], "image_size")
        meta["grid_size"] = grid_size(
            meta["image_size"], config.get("patch_size", 16), config.get("resnet")
        )
    return meta


def grid_size(image_size, patch_size, resnet=None):
    """(rows, cols) of the position embeddings of a model of `image_size` and
    `patch_size` (and `resnet`, a hybrid's spec): the patches of the image, or of
    the ResNet's feature map (each stride-2 step rounds up, so the map is
    ceil(size / stride))."""
    (height, width), (ph, pw) = to_pair(image_size), to_pair(patch_size, "patch_size")
    spec = resnet_spec(resnet)
    stride = resnet_stride(spec) if spec is not None else 1
    return -(-height // stride) // ph, -(-width // stride) // pw


def is_square(n):
    """Whether a count of tokens is a square grid's (n > 0)."""
    side = int(round(np.sqrt(n)))
    return n > 0 and side * side == n
