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
        if int(model.num_heads) != num_heads:
            raise CheckpointError(
                f"{origin}: config.json has num_attention_heads {num_heads}, the model "
                f"{model.num_heads}."
            )
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
