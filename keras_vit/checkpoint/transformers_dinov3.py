"""Hugging Face transformers' DINOv3 ViT (`DINOv3ViTModel`, model_type 'dinov3_vit'),
read into keras_vit's official names.

A directory of config.json and model.safetensors (or pytorch_model.bin);
`keras_vit.checkpoint.transformers_format` sends it here by its model_type. Keys:

    embeddings.cls_token, .register_tokens      cls, Transformer/registers (after the
                                                class token)
    embeddings.patch_embeddings (a Conv2d)      embedding/kernel, /bias
    model.layer.{i}.norm1, .norm2               .../LayerNorm_0, LayerNorm_2
    model.layer.{i}.attention.q_proj, .k_proj,  .../query, key, value, out (a bias
    .v_proj, .o_proj                            absent: zero; key_bias=False)
    model.layer.{i}.layer_scale1.lambda1, ...2  .../LayerScale_1/scale, LayerScale_3/scale
    model.layer.{i}.mlp.up_proj, .down_proj     .../MlpBlock_3/Dense_0, Dense_1
    model.layer.{i}.mlp.gate_proj               with up_proj: Dense_0 as [gate, value]
                                                (use_gated_mlp: SiLU(gate) * up)
    norm                                        Transformer/encoder_norm
    (embeddings.mask_token: not read; an unmasked forward skips it)

No learned position embeddings: DINOv3's rotary ones (`rope` kind 'dinov3',
rope_theta its temperature), on the patches after the class token and the
registers. The model's output, pooler_output, is the normed class token: what
keras_vit's headless 'token' model gives, which the folder alone builds (it has no
classifier: `keras_vit.checkpoint.metadata`'s include_top).
"""

import re

import numpy as np

from keras_vit.checkpoint import sizes as sizes_lib
from keras_vit.checkpoint import torch_layout
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.refused import refuse
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TIMM
from keras_vit.layers.rotary import rope_spec

MODEL_TYPE = "dinov3_vit"
# DINOv3ViTConfig's defaults, where a config.json (written as a diff) leaves a key out.
DEFAULTS = dict(
    patch_size=16,
    hidden_size=384,
    intermediate_size=1536,
    num_hidden_layers=12,
    num_attention_heads=6,
    hidden_act="gelu",
    layer_norm_eps=1e-5,
    rope_theta=100.0,
    image_size=224,
    num_channels=3,
    query_bias=True,
    key_bias=False,
    value_bias=True,
    proj_bias=True,
    mlp_bias=True,
    layerscale_value=1.0,
    use_gated_mlp=False,
    num_register_tokens=0,
)
_LAYER = re.compile(r"^(?:model\.)?layer\.(\d+)\.(.+)$")
_PROJECTIONS = {"query": "q_proj", "key": "k_proj", "value": "v_proj", "out": "o_proj"}
_UNUSED = ("embeddings.mask_token",)


def claims(config):
    """Whether a transformers config.json (a dict) is DINOv3's ViT."""
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def open_state(origin, state, config, preprocessing=None):
    """What a DINOv3ViTModel checkpoint records, and how to read it (as
    `transformers_format.open_state`: (metadata, read, sizes)).

    Raises:
        RefusedFeatureError: a gated MLP of another activation than SiLU, an MLP
            activation other than the GELU (named).
        CheckpointError: keys of another model, a mismatch with config.json (named).
    """
    config = {**DEFAULTS, **config}
    gated = bool(config["use_gated_mlp"])
    act = config["hidden_act"]
    if act != ("silu" if gated else "gelu"):
        refuse(origin, "activation", f"hidden_act={act!r} with use_gated_mlp={gated}")
    state = {k: v for k, v in state.items() if k not in _UNUSED}
    num_heads = int(config["num_attention_heads"])
    # (pos_embed_shift, _jitter, _rescale: training-time augmentation, not in the forward.)
    params, blocks = _params(origin, state, int(config["num_hidden_layers"]), gated)
    patch = to_pair(config["patch_size"], "patch_size")
    image_size = to_pair(config["image_size"], "image_size")
    registers = params.get("Transformer/registers")
    meta = {
        "classifier": "token",
        "channels": int(params["embedding/kernel"].shape[2]),
        "representation_size": None,
        "image_size": image_size,
        "grid_size": (image_size[0] // patch[0], image_size[1] // patch[1]),
        "approximate_gelu": False,
        "layer_norm_epsilon": float(config["layer_norm_eps"]),
        "fc_norm": False,
        "layer_scale_init": float(config["layerscale_value"]),
        "num_registers": 0 if registers is None else int(registers.shape[1]),
        "absolute_position_embedding": False,
        "rope": rope_spec({"kind": "dinov3", "temperature": float(config["rope_theta"])}),
        "gated_mlp": gated,
        "patch_embedding_bias": "embedding/bias" in params,
        "preprocessing": preprocessing,
        "posemb_resize": TIMM,
    }
    sizes = sizes_lib.transformers_sizes(config, patch, num_heads)

    def read(model):
        sizes_lib.check_fits(origin, sizes, model)
        return params_with_heads(params, blocks, num_heads)

    return meta, read, sizes


def _params(origin, state, num_layers, gated):
    """(params, blocks): the arrays under official names but the blocks', and per
    block its PyTorch parts and LayerScales, heads not yet split (`params_with_heads`)."""
    left = set(state)

    def take(key, optional=False):
        if key not in state:
            if optional:
                return None
            raise CheckpointError(f"{origin}: key '{key}' is missing.")
        left.discard(key)
        return state[key]

    stem = "embeddings.patch_embeddings"
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(take(f"{stem}.weight")),
        "cls": take("embeddings.cls_token"),
        "Transformer/encoder_norm/scale": take("norm.weight"),
        "Transformer/encoder_norm/bias": take("norm.bias"),
    }
    bias = take(f"{stem}.bias", optional=True)
    if bias is not None:
        params["embedding/bias"] = bias
    registers = take("embeddings.register_tokens", optional=True)
    if registers is not None and registers.shape[1]:
        params["Transformer/registers"] = registers
    layer_keys = {}
    for key in state:
        m = _LAYER.match(key)
        if m:
            layer_keys.setdefault(int(m.group(1)), {})[m.group(2)] = key
    if sorted(layer_keys) != list(range(num_layers)):
        raise CheckpointError(
            f"{origin}: layers {sorted(layer_keys)[:3]}... do not match config.json's "
            f"num_hidden_layers {num_layers}."
        )
    blocks = {}
    for index, keys in layer_keys.items():

        def part(name, keys=keys, index=index):
            weight = take(keys.get(f"{name}.weight", f"layer.{index}.{name}.weight"))
            bias_key = keys.get(f"{name}.bias")
            return weight, (take(bias_key) if bias_key else None)

        parts = {
            "norm_1": part("norm1"),
            "norm_2": part("norm2"),
            "dense_1": part("mlp.down_proj"),
            **{role: part(f"attention.{module}") for role, module in _PROJECTIONS.items()},
        }
        up = part("mlp.up_proj")
        if gated:
            gate = part("mlp.gate_proj")
            parts["dense_0"] = (
                np.concatenate([gate[0], up[0]]),
                None if up[1] is None else np.concatenate([gate[1], up[1]]),
            )
        else:
            parts["dense_0"] = up
        for role in ("dense_0", "dense_1", "out"):
            weight, bias = parts[role]
            if bias is None:
                parts[role] = (weight, np.zeros(weight.shape[0], weight.dtype))
        prefix = torch_layout.block_prefix(index)
        scales = {
            prefix + "LayerScale_1/scale": take(keys["layer_scale1.lambda1"]),
            prefix + "LayerScale_3/scale": take(keys["layer_scale2.lambda1"]),
        }
        blocks[index] = (parts, scales)
    if left:
        shown = ", ".join(sorted(left)[:8])
        raise CheckpointError(f"{origin}: {len(left)} keys DINOv3ViTModel does not have: {shown}.")
    return params, blocks


def params_with_heads(params, blocks, num_heads):
    """`_params`' arrays, the blocks' with the attention split into `num_heads` heads."""
    out = dict(params)
    for index, (parts, scales) in blocks.items():
        out.update(torch_layout.block_params(index, parts, num_heads))
        out.update(scales)
    return out
