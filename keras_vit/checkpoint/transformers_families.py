"""Hugging Face transformers' vision towers of the ViT families: DINOv2
(`Dinov2Model`), DINOv2 with registers (`Dinov2WithRegistersModel`), SigLIP's
(`SiglipVisionModel`) and CLIP's (`CLIPVisionModel`,
`CLIPVisionModelWithProjection`), read into keras_vit's official names.

A directory of config.json (its `model_type` says the family) and
model.safetensors (or pytorch_model.bin); `keras_vit.checkpoint.interop` sends
it here from `transformers_format`. Keys, and where they go:

    DINOv2 (model_type dinov2, dinov2_with_registers)
        embeddings.cls_token, .register_tokens  cls, Transformer/registers
        embeddings.position_embeddings          .../pos_embedding (the class token's row first)
        embeddings.patch_embeddings.projection  embedding/kernel, /bias
        encoder.layer.{i}.norm1, .norm2         .../LayerNorm_0, LayerNorm_2
        encoder.layer.{i}.attention.attention.query, .key, .value; .attention.output.dense
        encoder.layer.{i}.layer_scale1.lambda1, .layer_scale2.lambda1
                                                .../LayerScale_1/scale, LayerScale_3/scale
        encoder.layer.{i}.mlp.fc1, .fc2         .../MlpBlock_3/Dense_0, Dense_1
        layernorm                               Transformer/encoder_norm
        (embeddings.mask_token: not read; the forward of an unmasked image skips it)
    SigLIP and CLIP (model_type siglip_vision_model, clip_vision_model; keys under
    'vision_model.')
        embeddings.class_embedding (D,)         cls (CLIP)
        embeddings.patch_embedding              embedding/kernel (/bias: SigLIP's)
        embeddings.position_embedding.weight    .../pos_embedding (1, N, D)
        pre_layrnorm                            Transformer/encoder_prenorm (CLIP)
        encoder.layers.{i}.layer_norm1, .layer_norm2, .self_attn.{q,k,v,out}_proj,
        .mlp.fc1, .mlp.fc2                      the block's
        post_layernorm                          Transformer/encoder_norm (SigLIP: on
                                                every token), fc_norm (CLIP: on the
                                                class token alone)
        head.probe, .attention.in_proj_*, .out_proj, .layernorm, .mlp
                                                MAPHead_0/... (SigLIP)
        visual_projection (P, D), no bias       head, a zero bias
                                                (CLIPVisionModelWithProjection)

What each model outputs is what keras_vit's headless model gives (include_top=False):
DINOv2's pooler_output (the normed class token), SigLIP's pooler_output (the MAP
head), CLIP's pooler_output (post_layernorm of the class token); with its head,
CLIPVisionModelWithProjection's image_embeds.
"""

import re

import numpy as np

from keras_vit.checkpoint import sizes as sizes_lib
from keras_vit.checkpoint import torch_layout
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.refused import refuse
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TIMM, TRANSFORMERS

DINOV2, DINOV2_REGISTERS = "dinov2", "dinov2_with_registers"
SIGLIP, CLIP = "siglip_vision_model", "clip_vision_model"
MODEL_TYPES = (DINOV2, DINOV2_REGISTERS, SIGLIP, CLIP)
# Each config class's defaults, where a config.json (written as a diff) leaves a key out.
DEFAULTS = {
    DINOV2: dict(
        hidden_act="gelu",
        layer_norm_eps=1e-6,
        image_size=224,
        patch_size=14,
        qkv_bias=True,
        layerscale_value=1.0,
        use_swiglu_ffn=False,
        num_channels=3,
    ),
    SIGLIP: dict(
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
        image_size=224,
        patch_size=16,
        vision_use_head=True,
        num_channels=3,
    ),
    CLIP: dict(
        hidden_act="quick_gelu", layer_norm_eps=1e-5, image_size=224, patch_size=32, num_channels=3
    ),
}
DEFAULTS[DINOV2_REGISTERS] = dict(DEFAULTS[DINOV2], patch_size=16, num_register_tokens=4)
# transformers' activation names -> (approximate_gelu, quick_gelu).
ACTIVATIONS = {
    "gelu": (False, False),
    "gelu_python": (False, False),
    "gelu_new": (True, False),
    "gelu_fast": (True, False),
    "gelu_pytorch_tanh": (True, False),
    "gelu_python_tanh": (True, False),
    "quick_gelu": (False, True),
}
VISION = "vision_model."
_DINOV2_LAYER = {
    "norm1": "norm_1",
    "attention.attention.query": "query",
    "attention.attention.key": "key",
    "attention.attention.value": "value",
    "attention.output.dense": "out",
    "norm2": "norm_2",
    "mlp.fc1": "dense_0",
    "mlp.fc2": "dense_1",
}
_TOWER_LAYER = {
    "layer_norm1": "norm_1",
    "self_attn.q_proj": "query",
    "self_attn.k_proj": "key",
    "self_attn.v_proj": "value",
    "self_attn.out_proj": "out",
    "layer_norm2": "norm_2",
    "mlp.fc1": "dense_0",
    "mlp.fc2": "dense_1",
}
_LAYER_SCALES = {"layer_scale1.lambda1": "LayerScale_1", "layer_scale2.lambda1": "LayerScale_3"}
_UNUSED = ("embeddings.mask_token", "embeddings.position_ids")


def claims(config):
    """Whether a transformers config.json (a dict) is one of these families'."""
    return isinstance(config, dict) and config.get("model_type") in MODEL_TYPES


def open_state(origin, state, config, preprocessing=None):
    """What a family's checkpoint records, and how to read it (as
    `transformers_format.open_state`: (metadata, read, sizes)).

    Raises:
        RefusedFeatureError: SwiGLU (use_swiglu_ffn), another activation,
            Dinov2ForImageClassification's head on the class token and the
            patches' mean, SigLIP's towers without their head.
        CheckpointError: keys of another model, sizes that do not agree (named).
    """
    model_type = config["model_type"]
    config = {**DEFAULTS[model_type], **config}
    dinov2 = model_type in (DINOV2, DINOV2_REGISTERS)
    if config.get("use_swiglu_ffn"):
        refuse(origin, "gated MLP", "config.json use_swiglu_ffn=True")
    act = config["hidden_act"]
    if act not in ACTIVATIONS:
        refuse(origin, "activation", f"hidden_act={act!r}")
    if model_type == SIGLIP and not config["vision_use_head"]:
        refuse(origin, "attention pooling", "vision_use_head=False: no pooling head")
    state = {k: v for k, v in state.items() if not k.endswith(_UNUSED)}
    if dinov2:
        state = {k[len("dinov2.") :] if k.startswith("dinov2.") else k: v for k, v in state.items()}
        if "classifier.weight" in state:
            refuse(
                origin,
                "class token and patch mean head",
                f"'classifier.weight' {tuple(state['classifier.weight'].shape)}",
            )
    else:
        state = {k[len(VISION) :] if k.startswith(VISION) else k: v for k, v in state.items()}
    params = _dinov2_params(state) if dinov2 else _tower_params(state, model_type)
    num_heads = int(config["num_attention_heads"])
    patch = to_pair(config["patch_size"], "patch_size")
    image_size = to_pair(config["image_size"], "image_size")
    grid = (image_size[0] // patch[0], image_size[1] // patch[1])
    has_cls = model_type != SIGLIP
    rows = params["pos_embedding"].shape[1]
    if rows != int(has_cls) + grid[0] * grid[1]:
        raise CheckpointError(
            f"{origin}: the position embeddings have {rows} rows, config.json's image_size "
            f"{config['image_size']} and patch_size {config['patch_size']} give "
            f"{int(has_cls)} + {grid[0]}x{grid[1]}."
        )
    approximate, quick = ACTIVATIONS[act]
    registers = params.get("Transformer/registers")
    meta = {
        "classifier": "token" if has_cls else "map",
        "channels": int(params["embedding/kernel"].shape[2]),
        "representation_size": None,
        "image_size": image_size,
        "grid_size": grid,
        "approximate_gelu": approximate,
        "quick_gelu": quick,
        "layer_norm_epsilon": float(config["layer_norm_eps"]),
        "fc_norm": model_type == CLIP,
        "layer_scale_init": float(config["layerscale_value"]) if dinov2 else None,
        "num_registers": 0 if registers is None else int(registers.shape[1]),
        "pre_norm": model_type == CLIP,
        "patch_embedding_bias": "embedding/bias" in params,
        "preprocessing": preprocessing,
        # DINOv2 with registers resizes with antialias (timm's kernel), the others without.
        "posemb_resize": TIMM if model_type == DINOV2_REGISTERS else TRANSFORMERS,
    }
    if "head/kernel" in params:
        meta["num_classes"] = int(params["head/kernel"].shape[-1])
    sizes = {
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "hidden_size": int(config["hidden_size"]),
        "mlp_dim": int(
            config.get("intermediate_size") or int(config["hidden_size"] * config["mlp_ratio"])
        ),
        "num_heads": num_heads,
        "num_layers": int(config["num_hidden_layers"]),
    }

    def read(model):
        sizes_lib.check_fits(origin, sizes, model)  # the model's sizes, or the flags that fit
        return _split_heads(params, num_heads)

    return meta, read, sizes


def _take(state, key, origin_keys):
    if key not in state:
        raise CheckpointError(f"key '{key}' is missing (a checkpoint of another model?).")
    origin_keys.discard(key)
    return np.asarray(state[key])


def _layer_indices(state, pattern):
    return sorted({int(m.group(1)) for key in state if (m := pattern.match(key))})


def _dinov2_params(state):
    """A DINOv2 state dict (no prefix) as official arrays, attention still
    (out, in) Linear pairs under 'parts' (`_split_heads` splits the heads)."""
    left = set(state)
    take = lambda key: _take(state, key, left)  # noqa: E731
    projection = "embeddings.patch_embeddings.projection"
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(take(f"{projection}.weight")),
        "embedding/bias": take(f"{projection}.bias"),
        "cls": take("embeddings.cls_token"),
        "pos_embedding": take("embeddings.position_embeddings"),
        "parts": {},
    }
    if "embeddings.register_tokens" in state:
        params["Transformer/registers"] = take("embeddings.register_tokens")
    for index, prefix in _layers(state, "encoder.layer", _DINOV2_LAYER, params, take, left):
        for module, name in _LAYER_SCALES.items():
            params[f"{torch_layout.block_prefix(index)}{name}/scale"] = take(prefix + module)
    params["Transformer/encoder_norm/scale"] = take("layernorm.weight")
    params["Transformer/encoder_norm/bias"] = take("layernorm.bias")
    _no_more(left)
    return params


def _layers(state, stem, modules, params, take, left):
    """Fills params["parts"][i] for each block `stem`.i of `state`: {role: (weight, bias
    or None)} of the block's `modules` ({module name: role}); returns [(i, its prefix)]."""
    blocks = []
    for index in _layer_indices(state, re.compile(rf"^{re.escape(stem)}\.(\d+)\.")):
        prefix = f"{stem}.{index}."
        params["parts"][index] = {
            role: (
                take(f"{prefix}{module}.weight"),
                _optional(state, f"{prefix}{module}.bias", left),
            )
            for module, role in modules.items()
        }
        blocks.append((index, prefix))
    return blocks


def _tower_params(state, model_type):
    """A SigLIP or CLIP vision tower's state dict ('vision_model.' removed) as
    official arrays, attention as `_dinov2_params`."""
    left = set(state)
    take = lambda key: _take(state, key, left)  # noqa: E731
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(
            take("embeddings.patch_embedding.weight")
        ),
        "pos_embedding": take("embeddings.position_embedding.weight")[None],
        "parts": {},
    }
    if "embeddings.patch_embedding.bias" in state:
        params["embedding/bias"] = take("embeddings.patch_embedding.bias")
    if model_type == CLIP:
        params["cls"] = take("embeddings.class_embedding").reshape(1, 1, -1)
        params["Transformer/encoder_prenorm/scale"] = take("pre_layrnorm.weight")
        params["Transformer/encoder_prenorm/bias"] = take("pre_layrnorm.bias")
    _layers(state, "encoder.layers", _TOWER_LAYER, params, take, left)
    final = "fc_norm" if model_type == CLIP else "Transformer/encoder_norm"
    params[f"{final}/scale"] = take("post_layernorm.weight")
    params[f"{final}/bias"] = take("post_layernorm.bias")
    if model_type == SIGLIP:
        weight, bias = take("head.attention.in_proj_weight"), take("head.attention.in_proj_bias")
        head = {
            "probe": take("head.probe"),
            "parts": dict(
                zip(
                    ("query", "key", "value"),
                    zip(np.split(weight, 3), np.split(bias, 3)),
                ),
                out=(take("head.attention.out_proj.weight"), take("head.attention.out_proj.bias")),
            ),
            "LayerNorm_0/scale": take("head.layernorm.weight"),
            "LayerNorm_0/bias": take("head.layernorm.bias"),
        }
        for module, name in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
            head[f"MlpBlock_0/{name}/kernel"] = take(f"head.mlp.{module}.weight").T
            head[f"MlpBlock_0/{name}/bias"] = take(f"head.mlp.{module}.bias")
        params["map_head"] = head
    if "visual_projection.weight" in state:  # CLIPVisionModelWithProjection
        weight = take("visual_projection.weight")
        params["head/kernel"] = weight.T
        params["head/bias"] = np.zeros(weight.shape[0], weight.dtype)
    _no_more(left)
    return params


def _optional(state, key, left):
    left.discard(key)
    return state.get(key)


def _no_more(left):
    if left:
        shown = ", ".join(sorted(left)[:8])
        raise CheckpointError(f"{len(left)} keys that the model does not have: {shown}.")


def _split_heads(params, num_heads):
    """`_dinov2_params` / `_tower_params`' arrays with the attention split into
    `num_heads` heads: the official names."""
    out = {k: v for k, v in params.items() if k not in ("parts", "pos_embedding", "map_head")}
    out["Transformer/posembed_input/pos_embedding"] = params["pos_embedding"]
    for index, parts in params["parts"].items():
        out.update(torch_layout.block_params(index, parts, num_heads))
    head = params.get("map_head")
    if head is not None:
        prefix = "MAPHead_0/"
        out[prefix + "probe"] = head["probe"]
        attention = torch_layout.block_params(0, head["parts"], num_heads)
        for key, value in attention.items():
            name = key.replace(torch_layout.block_prefix(0) + "MultiHeadDotProductAttention_1", "")
            out[f"{prefix}MultiHeadDotProductAttention_0{name}"] = value
        out.update({prefix + k: v for k, v in head.items() if k not in ("probe", "parts")})
    return out


# --- writing ------------------------------------------------------------------------------

# model_type -> the transformers class a model of it is written as (headless; CLIP's
# with its projection as the head: CLIPVisionModelWithProjection).
ARCHITECTURES = {
    DINOV2: "Dinov2Model",
    DINOV2_REGISTERS: "Dinov2WithRegistersModel",
    SIGLIP: "SiglipVisionModel",
    CLIP: "CLIPVisionModel",
}
CLIP_WITH_PROJECTION = "CLIPVisionModelWithProjection"
# What each model_type computes, as keras_vit's family options (beside its activation).
_SHAPES = {
    DINOV2: dict(classifier="token", pre_norm=False, fc_norm=False, patch_embedding_bias=True),
    SIGLIP: dict(classifier="map", pre_norm=False, fc_norm=False, patch_embedding_bias=True),
    # fc_norm either way: a LayerNorm of every token, then the class token, is
    # post_layernorm of the class token (timm's CLIP towers are written so)
    CLIP: dict(classifier="token", pre_norm=True, patch_embedding_bias=False),
}


def family_of(model):
    """The model_type a family model is written as (`write_config`, `write_state`), or
    None for a model of none of these options (transformers' plain ViT).

    Raises:
        CheckpointError: family options no transformers class computes (named, with
            `save_timm` to write it instead): DeiT III's position embeddings for the
            patches alone, LayerScale or registers beside another family's options, a
            head on DINOv2 or SigLIP (their classification heads pool otherwise), ...
    """
    layer_scale = getattr(model, "layer_scale_init", None) is not None
    registers = int(getattr(model, "num_registers", 0))
    if model.classifier == "map":
        model_type = SIGLIP
    elif getattr(model, "pre_norm", False):
        model_type = CLIP
    elif layer_scale or registers:
        model_type = DINOV2_REGISTERS if registers else DINOV2
    else:
        return None
    name = model.name
    shape = _SHAPES[DINOV2 if model_type == DINOV2_REGISTERS else model_type]
    differs = [k for k, v in shape.items() if getattr(model, k, None) != v]
    if model_type in (DINOV2, DINOV2_REGISTERS):
        if not getattr(model, "position_embedding_for_class_token", True):
            differs.append("position_embedding_for_class_token")
    else:  # SigLIP's and CLIP's towers have neither; SigLIP's no QuickGELU
        quick = model_type == SIGLIP and getattr(model, "quick_gelu", False)
        extra = (
            ("layer_scale_init", layer_scale),
            ("num_registers", registers),
            ("quick_gelu", quick),
        )
        differs += [key for key, present in extra if present]
    if differs:
        raise CheckpointError(
            f"{name}: no transformers class computes a {ARCHITECTURES[model_type]}-like "
            f"model with {', '.join(f'{k}={getattr(model, k, None)!r}' for k in differs)} "
            "(write it for timm: keras_vit.checkpoint.save_timm)."
        )
    if model.include_top and model_type != CLIP:
        raise CheckpointError(
            f"{name}: a head on a {ARCHITECTURES[model_type]}: transformers' classification "
            "classes of this family pool otherwise (the class token and the patches' mean); "
            "write it headless (include_top=False), or for timm (save_timm)."
        )
    if model.include_top and getattr(model, "representation_size", None):
        raise CheckpointError(f"{name}: CLIP's towers have no pre_logits layer.")
    return model_type


def write_config(model, model_type, activations):
    """config.json of `model` as `model_type`'s class; `activations`: transformers'
    name for (approximate_gelu) of the exact and tanh GELU."""
    height, width = to_pair(model.image_size)
    patch = to_pair(model.patch_size)
    if height != width or patch[0] != patch[1]:
        raise CheckpointError(
            f"{model.name}: image {height}x{width}, patches {patch}: transformers' "
            f"{ARCHITECTURES[model_type]} takes square images and patches."
        )
    hidden = int(model.hidden_size)
    if getattr(model, "quick_gelu", False):
        act = "quick_gelu"
    else:
        act = activations[bool(model.approximate_gelu)]
    architecture = ARCHITECTURES[model_type]
    config = {
        "model_type": model_type,
        "hidden_size": hidden,
        "num_hidden_layers": int(model.num_layers),
        "num_attention_heads": int(model.num_heads),
        "num_channels": int(model.channels),
        "image_size": height,
        "patch_size": patch[0],
        "hidden_act": act,
        "layer_norm_eps": float(model.layer_norm_epsilon),
        "attention_dropout": 0.0,
    }
    if model_type in (DINOV2, DINOV2_REGISTERS):
        mlp_ratio = int(model.mlp_dim) / hidden
        if int(hidden * mlp_ratio) != int(model.mlp_dim):
            raise CheckpointError(f"{model.name}: mlp_dim {model.mlp_dim} is not a DINOv2 ratio.")
        config.update(
            mlp_ratio=int(mlp_ratio) if mlp_ratio.is_integer() else mlp_ratio,
            layerscale_value=float(model.layer_scale_init),
            qkv_bias=True,
            use_swiglu_ffn=False,
            drop_path_rate=0.0,
            hidden_dropout_prob=0.0,
            attention_probs_dropout_prob=0.0,
        )
        if model_type == DINOV2_REGISTERS:
            config["num_register_tokens"] = int(model.num_registers)
    else:
        config["intermediate_size"] = int(model.mlp_dim)
    if model_type == SIGLIP:
        config["vision_use_head"] = True
    if model_type == CLIP and model.include_top:
        architecture = CLIP_WITH_PROJECTION
        config["projection_dim"] = int(model.num_classes)
    config["architectures"] = [architecture]
    return config


def write_state(params, model_type):
    """Official arrays (`layout.model_params`) as `model_type`'s state dict, the
    inverse of what `open_state` reads (heads joined: `torch_layout.block_parts`)."""
    dinov2 = model_type in (DINOV2, DINOV2_REGISTERS)
    modules = _DINOV2_LAYER if dinov2 else _TOWER_LAYER
    stem = "encoder.layer" if dinov2 else "encoder.layers"
    state = torch_layout.blocks_state(params, stem, modules)
    for index in range(torch_layout.num_blocks(params)):
        for module, name in _LAYER_SCALES.items():
            scale = params.get(f"{torch_layout.block_prefix(index)}{name}/scale")
            if scale is not None:
                state[f"{stem}.{index}.{module}"] = scale
    kernel = torch_layout.conv_from_kernel(params["embedding/kernel"])
    position = params["Transformer/posembed_input/pos_embedding"]
    if dinov2:
        projection = "embeddings.patch_embeddings.projection"
        state[f"{projection}.weight"] = kernel
        state[f"{projection}.bias"] = params["embedding/bias"]
        state["embeddings.cls_token"] = params["cls"]
        # transformers' DINOv2 draws it for masked patches only; zero, as it initialises it
        state["embeddings.mask_token"] = np.zeros_like(params["cls"][0])
        state["embeddings.position_embeddings"] = position
        if "Transformer/registers" in params:
            state["embeddings.register_tokens"] = params["Transformer/registers"]
        state["layernorm.weight"] = params["Transformer/encoder_norm/scale"]
        state["layernorm.bias"] = params["Transformer/encoder_norm/bias"]
        return state
    state["embeddings.patch_embedding.weight"] = kernel
    if "embedding/bias" in params:
        state["embeddings.patch_embedding.bias"] = params["embedding/bias"]
    state["embeddings.position_embedding.weight"] = position[0]
    final = "fc_norm" if "fc_norm/scale" in params else "Transformer/encoder_norm"
    state["post_layernorm.weight"] = params[f"{final}/scale"]
    state["post_layernorm.bias"] = params[f"{final}/bias"]
    if model_type == CLIP:
        state["embeddings.class_embedding"] = params["cls"].reshape(-1)
        state["pre_layrnorm.weight"] = params["Transformer/encoder_prenorm/scale"]
        state["pre_layrnorm.bias"] = params["Transformer/encoder_prenorm/bias"]
    if model_type == SIGLIP:
        state.update(_map_head_state(params))
    state = {VISION + key: value for key, value in state.items()}
    if "head/kernel" in params:  # CLIPVisionModelWithProjection: no bias
        if np.any(params["head/bias"]):
            raise CheckpointError(
                "the head has a bias; CLIPVisionModelWithProjection's projection has none "
                "(write it for timm: keras_vit.checkpoint.save_timm)."
            )
        state["visual_projection.weight"] = np.asarray(params["head/kernel"]).T
    return state


def _map_head_state(params):
    """SigLIP's MAP head (official 'MAPHead_0/...') as transformers' `head.` keys: its
    query, key and value joined into one in_proj, as torch's MultiheadAttention keeps them."""
    prefix = "MAPHead_0/"
    attention = prefix + "MultiHeadDotProductAttention_0/"
    joined = {
        role: torch_layout.linear_from_heads(
            params[f"{attention}{role}/kernel"], params[f"{attention}{role}/bias"], role
        )
        for role in ("query", "key", "value", "out")
    }
    qkv = ("query", "key", "value")
    state = {
        "head.probe": params[prefix + "probe"],
        "head.attention.in_proj_weight": np.concatenate([joined[r][0] for r in qkv]),
        "head.attention.in_proj_bias": np.concatenate([joined[r][1] for r in qkv]),
        "head.attention.out_proj.weight": joined["out"][0],
        "head.attention.out_proj.bias": joined["out"][1],
        "head.layernorm.weight": params[prefix + "LayerNorm_0/scale"],
        "head.layernorm.bias": params[prefix + "LayerNorm_0/bias"],
    }
    for module, name in (("fc1", "Dense_0"), ("fc2", "Dense_1")):
        dense = f"{prefix}MlpBlock_0/{name}/"
        state[f"head.mlp.{module}.weight"] = np.asarray(params[dense + "kernel"]).T
        state[f"head.mlp.{module}.bias"] = params[dense + "bias"]
    return state
