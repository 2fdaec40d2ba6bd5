"""timm's Vision Transformer checkpoints (`timm.models.vision_transformer`): read
into keras_vit's official names, and written back.

A timm checkpoint is a state dict (`model.safetensors`, `pytorch_model.bin`, or
any `.safetensors` / `.bin` / `.pth`), in timm's Hub layout with a `config.json`
beside it (`architecture`, `num_classes`, `global_pool`, `model_args`,
`pretrained_cfg`). Its keys, and where they go:

    patch_embed.proj.weight (D, C, P, P), .bias   embedding/kernel (P, P, C, D), /bias
    cls_token (1, 1, D)                           cls (absent: no class token)
    pos_embed (1, [1 +] N, D)                     Transformer/posembed_input/pos_embedding
                                                  (without the class token's row, as
                                                  timm's no_embed_class: a zero row)
    blocks.{i}.norm1, .norm2                      .../LayerNorm_0, LayerNorm_2
    blocks.{i}.attn.qkv (3D, D), .attn.proj       .../query, key, value (D, heads,
                                                  head_dim), out (heads, head_dim, D)
    blocks.{i}.mlp.fc1, .mlp.fc2                  .../MlpBlock_3/Dense_0, Dense_1
    norm                                          Transformer/encoder_norm
    fc_norm                                       fc_norm (the LayerNorm after pooling)
    pre_logits.fc (R, D)                          pre_logits (files of timm < 0.6)
    head (K, D)                                   head (absent: a headless model)

What the state dict does not say comes from config.json, else timm's defaults:
the pooling ('token' with a class token and no fc_norm; 'avg' without a class
token), the exact (erf) GELU of timm's nn.GELU (act_layer='gelu_tanh': the tanh
form), LayerNorm epsilon 1e-6. What keras_vit does not compute is refused by
name (`keras_vit.checkpoint.refused`).
"""

import os
import re

import numpy as np

from keras_vit.checkpoint import layout, state_dict, torch_layout
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.refused import refuse
from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TIMM
from keras_vit.preprocessing import mean_std
from keras_vit.variants import variant_name

# timm's VisionTransformer LayerNorms: partial(nn.LayerNorm, eps=1e-6), the official value.
TIMM_LAYER_NORM_EPSILON = LAYER_NORM_EPSILON
# timm's names of activations (`timm.layers.get_act_layer`): approximate_gelu.
ACTIVATIONS = {None: False, "gelu": False, "gelu_tanh": True}
# A keras_vit variant's timm architecture name (the model args give the sizes anyway).
TIMM_NAMES = {
    "ViT_Ti16": "vit_tiny_patch16_224",
    "ViT_S16": "vit_small_patch16_224",
    "ViT_S32": "vit_small_patch32_224",
    "ViT_B8": "vit_base_patch8_224",
    "ViT_B16": "vit_base_patch16_224",
    "ViT_B32": "vit_base_patch32_224",
    "ViT_L16": "vit_large_patch16_224",
    "ViT_L32": "vit_large_patch32_224",
    "ViT_H14": "vit_huge_patch14_224",
}
DEFAULT_NAME = TIMM_NAMES["ViT_B16"]

_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# A block's timm modules: role (torch_layout.BLOCK_ROLES) or the fused 'qkv'.
_BLOCK_MODULES = {
    "norm1": "norm_1",
    "attn.qkv": "qkv",
    "attn.proj": "out",
    "norm2": "norm_2",
    "mlp.fc1": "dense_0",
    "mlp.fc2": "dense_1",
}
_TOP_MODULES = ("patch_embed.proj", "norm", "fc_norm", "head", "pre_logits.fc")
_TOP_TENSORS = ("cls_token", "pos_embed")
# Keys (patterns) of features refused by name, and the feature.
_REFUSED_KEYS = (
    (re.compile(r"^(dist_token|head_dist\.)"), "distillation token"),
    (re.compile(r"^reg_token$"), "register tokens"),
    (re.compile(r"\.(ls[12]\.gamma|gamma_[12])$"), "LayerScale"),
    (re.compile(r"^norm_pre\."), "norm_pre"),
    (re.compile(r"\.attn\.[qk]_norm\."), "qk_norm"),
    (re.compile(r"^attn_pool\."), "attention pooling"),
    (re.compile(r"^patch_embed\.backbone\."), "hybrid ResNet"),
    (re.compile(r"^patch_embed\.norm\."), "patch-embedding norm"),
    (re.compile(r"\.(attn|mlp)\.norm\."), "scaled norms"),
    (re.compile(r"\.mlp\.(fc1_[gx]|w12|w3)\."), "gated MLP"),
)


def is_timm_state(keys):
    """Whether state dict keys are a timm ViT's (its patch embedding's key)."""
    return "patch_embed.proj.weight" in keys or any(
        key.startswith("patch_embed.backbone.") for key in keys
    )


def is_timm_config(config):
    """Whether a config.json (a dict) is timm's (it names an `architecture`)."""
    return isinstance(config, dict) and "architecture" in config and "model_type" not in config


def open_state(origin, state, config=None, arch=None):
    """What a timm state dict records, and how to read it for a model.

    Args:
        origin: the file, for messages.
        state: key -> array (`keras_vit.checkpoint.state_dict.read_state_dict`).
        config: timm's config.json beside it (a dict), or None.
        arch: the architecture it goes to (`keras_vit.checkpoint.source.architecture`),
            or None: where config.json records sizes, they are checked against it.
    Returns:
        (metadata, read, sizes): the metadata dict (`keras_vit.checkpoint.metadata`:
        classifier, channels, representation_size, num_classes, image_size,
        grid_size, and the family's approximate_gelu, layer_norm_epsilon,
        fc_norm), read(model) -> {official name: array} for the model's heads,
        and the sizes (patch_size, hidden_size, mlp_dim, num_heads, num_layers)
        where config.json's model_args say the heads, else None.
    Raises:
        RefusedFeatureError: a feature keras_vit does not compute (named).
        CheckpointError: not a timm ViT (its first keys named), unknown keys,
            sizes that disagree with `arch` (named).
    """
    model_args = _model_args(config)
    _check_keys(origin, state, model_args, config)
    classifier = "token" if "cls_token" in state else "gap"
    fc_norm = "fc_norm.weight" in state
    if "norm.weight" not in state and not fc_norm:
        refuse(origin, "no final LayerNorm", "neither 'norm' nor 'fc_norm'")
    pool = _global_pool(config, model_args, classifier, fc_norm)
    if pool == "avg" and classifier == "token":
        refuse(
            origin,
            "class token with average pooling",
            f"global_pool='avg' and 'cls_token'{_why_avg(config, model_args)}",
        )
    if pool not in ("token", "avg"):
        refuse(origin, "pooling", f"global_pool={pool!r}")
    act = model_args.get("act_layer")
    if act not in ACTIVATIONS:
        feature = "quick_gelu" if "quick" in str(act) else "activation"
        refuse(origin, feature, f"act_layer={act!r}")
    _check_sizes(origin, state, model_args, arch)
    no_embed_class = _no_embed_class(state, model_args)
    grid, patch = _grid(state, model_args, classifier, no_embed_class)
    meta = {
        "classifier": classifier,
        "channels": int(state["patch_embed.proj.weight"].shape[1]),
        "representation_size": (
            int(state["pre_logits.fc.weight"].shape[0]) if "pre_logits.fc.weight" in state else None
        ),
        "approximate_gelu": ACTIVATIONS[act],
        "layer_norm_epsilon": TIMM_LAYER_NORM_EPSILON,
        "fc_norm": fc_norm,
        "preprocessing": _preprocessing(origin, config),
        "posemb_resize": TIMM,  # timm's resample_abs_pos_embed
    }
    if "head.weight" in state:
        meta["num_classes"] = int(state["head.weight"].shape[0])
    if grid is not None:
        meta["grid_size"] = grid
        meta["image_size"] = (grid[0] * patch[0], grid[1] * patch[1])
    sizes = None
    if model_args.get("num_heads") is not None:
        sizes = {
            "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
            "hidden_size": int(state["patch_embed.proj.weight"].shape[0]),
            "mlp_dim": int(state["blocks.0.mlp.fc1.weight"].shape[0]),
            "num_heads": int(model_args["num_heads"]),
            "num_layers": _num_blocks(state),
        }
    return meta, lambda model: to_params(state, model.num_heads, no_embed_class), sizes


def to_params(state, num_heads, no_embed_class=False):
    """A timm ViT state dict (checked by `open_state`) as official arrays, for a
    model of `num_heads` heads. `no_embed_class`: the position embeddings leave
    out the class token (timm's no_embed_class), which then gets a zero row:
    adding nothing to it computes the same."""
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(state["patch_embed.proj.weight"]),
        "embedding/bias": state["patch_embed.proj.bias"],
    }
    posemb = state["pos_embed"]
    if "cls_token" in state:
        params["cls"] = state["cls_token"]
        if no_embed_class:
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
    params["Transformer/posembed_input/pos_embedding"] = posemb
    for index in range(_num_blocks(state)):
        prefix = f"blocks.{index}."
        parts = {}
        for module, role in _BLOCK_MODULES.items():
            weight, bias = state[f"{prefix}{module}.weight"], state.get(f"{prefix}{module}.bias")
            if role != "qkv":
                parts[role] = (weight, bias)
                continue
            weights = np.split(weight, 3, axis=0)
            biases = np.split(bias, 3) if bias is not None else (None,) * 3
            for name, w, b in zip(torch_layout.PROJECTIONS, weights, biases):
                parts[name] = (w, b)
        params.update(torch_layout.block_params(index, parts, num_heads))
    for module, name in (
        ("norm", "Transformer/encoder_norm"),
        ("fc_norm", "fc_norm"),
    ):
        if f"{module}.weight" in state:
            params[f"{name}/scale"] = state[f"{module}.weight"]
            params[f"{name}/bias"] = state[f"{module}.bias"]
    params.update(
        torch_layout.dense_params(state, (("pre_logits.fc", "pre_logits"), ("head", "head")))
    )
    return params


def save_timm(model, path):
    """Writes `model` as a timm checkpoint that `timm.create_model` loads.

    Args:
        model: a keras_vit `VisionTransformer` (plain, not hybrid; no pre_logits,
            which timm's ViT has no layer for; LayerNorm epsilon 1e-6).
        path: a directory (timm's Hub layout, as `timm.models.save_for_hf`
            writes it: model.safetensors + config.json, for
            `timm.create_model('local-dir:' + path, pretrained=True)`), or a file
            ending in .safetensors (the state dict alone).
    Returns:
        the path of the safetensors file written.
    Raises:
        CheckpointError: a model timm's ViT cannot express (named).
    """
    config = timm_config(model)
    state = from_params(layout.model_params(model))
    path = os.fspath(path)
    if path.endswith(state_dict.SAFETENSORS):
        state_dict.write_safetensors(path, state)
        return path
    os.makedirs(path, exist_ok=True)
    weights = os.path.join(path, state_dict.HUB_WEIGHTS[0])
    state_dict.write_safetensors(weights, state)
    state_dict.write_config(path, config)
    return weights


def from_params(params):
    """Official arrays (a plain ViT's, `keras_vit.checkpoint.layout.model_params`)
    as a timm state dict: the inverse of `to_params`."""
    state = {
        "patch_embed.proj.weight": torch_layout.conv_from_kernel(params["embedding/kernel"]),
        "patch_embed.proj.bias": params["embedding/bias"],
    }
    if "cls" in params:
        state["cls_token"] = params["cls"]
    state["pos_embed"] = params["Transformer/posembed_input/pos_embedding"]
    for index in range(torch_layout.num_blocks(params)):
        parts = torch_layout.block_parts(params, index)
        prefix = f"blocks.{index}."
        for module, role in _BLOCK_MODULES.items():
            if role == "qkv":
                weight = np.concatenate([parts[r][0] for r in torch_layout.PROJECTIONS])
                bias = np.concatenate([parts[r][1] for r in torch_layout.PROJECTIONS])
            else:
                weight, bias = parts[role]
            state[f"{prefix}{module}.weight"], state[f"{prefix}{module}.bias"] = weight, bias
    for name, module in (("Transformer/encoder_norm", "norm"), ("fc_norm", "fc_norm")):
        if f"{name}/scale" in params:
            state[f"{module}.weight"] = params[f"{name}/scale"]
            state[f"{module}.bias"] = params[f"{name}/bias"]
    if "head/kernel" in params:
        weight, bias = torch_layout.linear_from_dense(params["head/kernel"], params["head/bias"])
        state["head.weight"], state["head.bias"] = weight, bias
    return state


def timm_config(model):
    """timm's config.json for `model`: the architecture, `model_args` that
    rebuild it (`timm.create_model(architecture, **model_args)`) and a
    `pretrained_cfg` with its input size and normalisation.

    Raises:
        CheckpointError: a model timm's ViT cannot express (named).
    """
    _check_expressible(model)
    height, width = to_pair(model.image_size)
    hidden, mlp_dim = int(model.hidden_size), int(model.mlp_dim)
    num_classes = int(model.num_classes) if model.include_top else 0
    token = model.classifier == "token"
    arch = {
        key: getattr(model, key)
        for key in ("patch_size", "hidden_size", "mlp_dim", "num_heads", "num_layers")
    }
    patch = to_pair(model.patch_size)
    model_args = {
        "img_size": [height, width],
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "in_chans": int(model.channels),
        "embed_dim": hidden,
        "depth": int(model.num_layers),
        "num_heads": int(model.num_heads),
        "mlp_ratio": mlp_dim / hidden,
        "num_classes": num_classes,
        "global_pool": "token" if token else "avg",
        "class_token": token,
        "fc_norm": bool(getattr(model, "fc_norm", False)),
        "act_layer": "gelu_tanh" if getattr(model, "approximate_gelu", True) else "gelu",
    }
    mean, std = mean_std(getattr(model, "preprocessing", None), int(model.channels))
    return {
        "architecture": TIMM_NAMES.get(variant_name(arch), DEFAULT_NAME),
        "num_classes": num_classes,
        "num_features": hidden,
        "global_pool": model_args["global_pool"],
        "model_args": model_args,
        "pretrained_cfg": {
            "input_size": [int(model.channels), height, width],
            "fixed_input_size": True,
            "mean": mean,
            "std": std,
            "num_classes": num_classes,
            "first_conv": "patch_embed.proj",
            "classifier": "head",
        },
    }


def _check_expressible(model):
    name = model.name
    if getattr(model, "resnet", None) is not None:
        raise CheckpointError(
            f"{name}: a hybrid cannot be written for timm: timm's hybrids compute their "
            "ResNet otherwise (keras_vit.checkpoint.refused: 'hybrid ResNet')."
        )
    if model.representation_size:
        raise CheckpointError(
            f"{name}: representation_size={model.representation_size}: timm's ViT has no "
            "pre_logits layer to write it to."
        )
    epsilon = float(getattr(model, "layer_norm_epsilon", LAYER_NORM_EPSILON))
    if epsilon != TIMM_LAYER_NORM_EPSILON:
        raise CheckpointError(
            f"{name}: layer_norm_epsilon={epsilon}: timm's ViT LayerNorms use "
            f"{TIMM_LAYER_NORM_EPSILON}."
        )
    hidden, mlp_dim = int(model.hidden_size), int(model.mlp_dim)
    if int(hidden * (mlp_dim / hidden)) != mlp_dim:
        raise CheckpointError(
            f"{name}: mlp_dim={mlp_dim} is not int(hidden_size * mlp_ratio) for any "
            f"mlp_ratio timm can be given (hidden_size {hidden})."
        )


def _preprocessing(origin, config):
    """The input normalisation config.json's `pretrained_cfg` states (mean and std
    on the [0, 1] scale), checked; None where it states none or the authors'."""
    pretrained = (config or {}).get("pretrained_cfg") or {}
    if "mean" not in pretrained or "std" not in pretrained:
        return None
    return state_dict.checked_preprocessing(
        pretrained["mean"], pretrained["std"], f"{origin}: config.json pretrained_cfg"
    )


def _model_args(config):
    if config is None:
        return {}
    args = config.get("model_args") or {}
    if not isinstance(args, dict):
        raise CheckpointError(f"timm config: 'model_args' is not a mapping: {args!r}.")
    return args


def _check_keys(origin, state, model_args, config):
    """Refused features by key and by config; then every key must be one timm's
    plain ViT has."""
    if not is_timm_state(state):
        first = ", ".join(list(state)[:5])
        raise CheckpointError(
            f"{origin} is not a timm ViT state dict: it has no 'patch_embed.proj.weight' "
            f"(its first keys: {first})."
        )
    for key in state:
        for pattern, feature in _REFUSED_KEYS:
            if pattern.search(key):
                refuse(origin, feature, f"key '{key}'")
    for arg, feature, refused in (
        ("reg_tokens", "register tokens", lambda v: bool(v)),
        ("init_values", "LayerScale", lambda v: v is not None),
        ("pre_norm", "norm_pre", lambda v: bool(v)),
        ("qk_norm", "qk_norm", lambda v: bool(v)),
        ("patch_drop_rate", "patch dropout", lambda v: bool(v)),
        ("final_norm", "no final LayerNorm", lambda v: v is False),
        ("embed_norm_layer", "patch-embedding norm", lambda v: v is not None),
        ("scale_attn_norm", "scaled norms", lambda v: bool(v)),
        ("scale_mlp_norm", "scaled norms", lambda v: bool(v)),
        ("pos_embed", "no learned position embedding", lambda v: v != "learn"),
    ):
        if arg in model_args and refused(model_args[arg]):
            refuse(origin, feature, f"config.json model_args {arg}={model_args[arg]!r}")
    architecture = str((config or {}).get("architecture", ""))
    if "quickgelu" in architecture:
        refuse(origin, "quick_gelu", f"architecture {architecture!r}")
    if "pos_embed" not in state:
        refuse(origin, "no learned position embedding", "no 'pos_embed'")
    known = {f"{module}.{part}" for module in _TOP_MODULES for part in ("weight", "bias")}
    known.update(_TOP_TENSORS)
    unknown = []
    for key in state:
        m = _BLOCK.match(key)
        if key in known:
            continue
        if (
            m
            and m.group(2).rpartition(".")[0] in _BLOCK_MODULES
            and key.endswith((".weight", ".bias"))
        ):
            continue
        unknown.append(key)
    if unknown:
        shown = ", ".join(unknown[:8]) + (
            f", ... ({len(unknown) - 8} more)" if len(unknown) > 8 else ""
        )
        raise CheckpointError(
            f"{origin}: {len(unknown)} keys that timm's plain ViT does not have: {shown}."
        )
    blocks = _num_blocks(state)
    for index in range(blocks):
        for module in _BLOCK_MODULES:
            if f"blocks.{index}.{module}.weight" not in state:
                raise CheckpointError(f"{origin}: key 'blocks.{index}.{module}.weight' is missing.")
    for module in ("patch_embed.proj", "norm", "fc_norm", "head", "pre_logits.fc"):
        has_weight, has_bias = f"{module}.weight" in state, f"{module}.bias" in state
        if has_weight != has_bias:
            missing = f"{module}.bias" if has_weight else f"{module}.weight"
            raise CheckpointError(f"{origin}: key '{missing}' is missing.")


def _num_blocks(state):
    indices = {int(m.group(1)) for key in state if (m := _BLOCK.match(key))}
    return max(indices) + 1 if indices else 0


def _global_pool(config, model_args, classifier, fc_norm):
    """timm's global_pool: config.json's, else what timm's defaults give the keys
    (fc_norm defaults to global_pool == 'avg')."""
    for source in (model_args, config or {}):
        if source.get("global_pool") is not None:
            return source["global_pool"]
    if classifier == "gap" or fc_norm:
        return "avg"
    return "token"


def _why_avg(config, model_args):
    if any("global_pool" in source for source in (model_args, config or {})):
        return ""
    return (
        "; with no config.json saying global_pool, 'fc_norm' means timm's default global_pool='avg'"
    )


def _check_sizes(origin, state, model_args, arch):
    """Sizes that config.json records against those of the model the file goes to."""
    if not arch:
        return
    recorded = {
        "hidden_size": model_args.get("embed_dim"),
        "num_heads": model_args.get("num_heads"),
        "num_layers": model_args.get("depth"),
    }
    for key, value in recorded.items():
        if value is not None and arch.get(key) is not None and int(value) != int(arch[key]):
            raise CheckpointError(
                f"{origin}: its config.json records {key} {value}, the model has {arch[key]}."
            )


def _no_embed_class(state, model_args):
    """Whether the position embeddings leave out the class token (timm's
    no_embed_class: DeiT III, newer big_vision ports): config.json's word, else
    one row per patch of config.json's img_size, else a square number of rows."""
    if "cls_token" not in state:
        return False
    if model_args.get("no_embed_class") is not None:
        return bool(model_args["no_embed_class"])
    tokens = state["pos_embed"].shape[1]
    if model_args.get("img_size") is not None:
        kernel = state["patch_embed.proj.weight"]
        height, width = to_pair(model_args["img_size"], "img_size")
        return tokens == (height // kernel.shape[2]) * (width // kernel.shape[3])
    return _is_square(tokens) and not _is_square(tokens - 1)


def _grid(state, model_args, classifier, no_embed_class):
    """(rows, cols) of the position embeddings and the (ph, pw) patch: from
    config.json's img_size where it says, else a square grid, else (None, patch)."""
    kernel = state["patch_embed.proj.weight"]
    patch = (int(kernel.shape[2]), int(kernel.shape[3]))
    if model_args.get("img_size") is not None:
        height, width = to_pair(model_args["img_size"], "img_size")
        return (height // patch[0], width // patch[1]), patch
    tokens = state["pos_embed"].shape[1]
    if classifier == "token" and not no_embed_class:
        tokens -= 1
    if not _is_square(tokens):
        return None, patch
    side = int(round(np.sqrt(tokens)))
    return (side, side), patch


def _is_square(n):
    side = int(round(np.sqrt(n)))
    return n > 0 and side * side == n
