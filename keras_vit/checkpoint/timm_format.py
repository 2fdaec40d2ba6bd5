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
    norm                                          Transformer/encoder_norm (absent with
                                                  fc_norm, and with final_norm=False)
    fc_norm                                       fc_norm (the LayerNorm after pooling)
    pre_logits.fc (R, D)                          pre_logits (files of timm < 0.6)
    head (K, D)                                   head (absent: a headless model)

The families' keys (DeiT III, DINOv2, SigLIP, CLIP) and timm's options of the plain
ViT (qk_norm, embed_norm_layer, final_norm=False: no `norm` nor `fc_norm`):

    reg_token (1, R, D)                           Transformer/registers
    patch_embed.norm (D,)                         embedding/norm (embed_norm_layer)
    blocks.{i}.attn.q_norm, .k_norm (head_dim,)   .../MultiHeadDotProductAttention_1/
                                                  query_norm, key_norm (qk_norm)
    norm_pre                                      Transformer/encoder_prenorm
    blocks.{i}.ls1.gamma, .ls2.gamma (D,)         .../LayerScale_1/scale, LayerScale_3/scale
    attn_pool.latent (1, 1, D)                    MAPHead_0/probe
    attn_pool.q, .kv (2D, D), .proj               MAPHead_0/MultiHeadDotProductAttention_0/
                                                  query, key and value, out
    attn_pool.norm, .mlp.fc1, .mlp.fc2            MAPHead_0/LayerNorm_0, MlpBlock_0/Dense_0, _1

The sizes come from the shapes (the heads excepted). What the state dict does not
say comes from config.json, else from what timm's architecture of that name sets
(`implicit_model_args`: CLIP's LayerNorm epsilon 1e-5 and QuickGELU, the tanh GELU of
the SigLIP 2-era towers, DeiT III's and DINOv2-with-registers' no_embed_class), else
timm's defaults: the pooling ('token' with a class token and no fc_norm; 'avg'
without a class token or with fc_norm, keras_vit's 'gap' and 'token_gap'; 'map' with
attn_pool), the exact (erf) GELU of timm's nn.GELU (act_layer='gelu_tanh': the tanh
form), LayerNorm epsilon 1e-6. A bare state dict (no config.json) takes from its
shape only what every timm architecture of that shape sets (`_inferred_model_args`,
`keras_vit.checkpoint.sizes.published_heads`); the rest is undetermined, for the
caller to give (`keras_vit.checkpoint.sizes`). What keras_vit does not compute is
refused by name (`keras_vit.checkpoint.refused`).
"""

import re

import numpy as np

from keras_vit.applications_args import has_class_token
from keras_vit.checkpoint import sizes as sizes_lib
from keras_vit.checkpoint import state_dict, torch_layout
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.metadata import is_square
from keras_vit.checkpoint.refused import refuse
from keras_vit.layers.encoder_block import LAYER_NORM_EPSILON
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TIMM
from keras_vit.preprocessing import mean_std
from keras_vit.variants import variant_name

# timm's VisionTransformer LayerNorms: partial(nn.LayerNorm, eps=1e-6), the official value.
TIMM_LAYER_NORM_EPSILON = LAYER_NORM_EPSILON
# timm's names of an embed_norm_layer that is its LayerNorm (epsilon 1e-6); None: none.
EMBED_NORMS = (None, "layernorm")
# timm's names of activations (`timm.layers.get_act_layer`): approximate_gelu.
ACTIVATIONS = {None: False, "gelu": False, "gelu_tanh": True, "quick_gelu": False}
# LayerNorm epsilon of timm's CLIP towers (partial(LayerNorm, eps=1e-5)).
CLIP_LAYER_NORM_EPSILON = 1e-5
# timm 1.0's architectures whose MLPs use the tanh GELU without their config.json
# saying so (act_layer='gelu_tanh' in their model_args): SigLIP's later towers.
GELU_TANH_ARCHITECTURES = frozenset(
    f"vit_{size}_siglip{gap}_{res}"
    for gap in ("", "_gap")
    for size, res in (
        ("base_patch32", 256),
        ("giantopt_patch16", 256),
        ("giantopt_patch16", 384),
        ("large_patch16", 512),
        ("so400m_patch16", 256),
        ("so400m_patch16", 384),
        ("so400m_patch16", 512),
    )
)
# What keras_vit writes for a family (save_timm): the architecture whose defaults
# give the model_args JSON cannot (CLIP's LayerNorm epsilon 1e-5).
CLIP_ARCHITECTURE = "vit_base_patch16_clip_224"
CLIP_QUICKGELU_ARCHITECTURE = "vit_base_patch16_clip_quickgelu_224"
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

# A key of a block (timm's plain ViT and eva.py alike): its index and its key in the block.
BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
# A block's timm modules: role (torch_layout.BLOCK_ROLES) or the fused 'qkv'.
_BLOCK_MODULES = {
    "norm1": "norm_1",
    "attn.qkv": "qkv",
    "attn.proj": "out",
    "norm2": "norm_2",
    "mlp.fc1": "dense_0",
    "mlp.fc2": "dense_1",
}
_TOP_MODULES = (
    "patch_embed.proj",
    "patch_embed.norm",
    "norm",
    "fc_norm",
    "head",
    "pre_logits.fc",
    "norm_pre",
)
# LayerNorms (weight and bias) outside the blocks: timm's module -> keras_vit's name.
_TOP_NORMS = {
    "patch_embed.norm": "embedding/norm",
    "norm_pre": "Transformer/encoder_prenorm",
    "norm": "Transformer/encoder_norm",
    "fc_norm": "fc_norm",
}
# Per block, timm's qk_norm: module -> keras_vit's name under the block's attention.
_QK_NORMS = {"attn.q_norm": "query_norm", "attn.k_norm": "key_norm"}
_ATTENTION = "MultiHeadDotProductAttention_1/"
_TOP_TENSORS = ("cls_token", "pos_embed", "reg_token")
# Per block, beside _BLOCK_MODULES: LayerScale (timm's `ls1`, `ls2`).
_LAYER_SCALES = {"ls1.gamma": "LayerScale_1", "ls2.gamma": "LayerScale_3"}
# timm's AttentionPoolLatent (global_pool='map'): module -> keras_vit name under MAPHead_0.
_ATTN_POOL = "attn_pool."
_ATTN_POOL_MODULES = {
    "proj": "MultiHeadDotProductAttention_0/out",
    "norm": "LayerNorm_0",
    "mlp.fc1": "MlpBlock_0/Dense_0",
    "mlp.fc2": "MlpBlock_0/Dense_1",
}
MAP_HEAD = "MAPHead_0/"
_ATTN_POOL_KEYS = frozenset(
    [_ATTN_POOL + "latent"]
    + [
        f"{_ATTN_POOL}{module}.{part}"
        for module in ("q", "kv", *_ATTN_POOL_MODULES)
        for part in ("weight", "bias")
    ]
)
# Keys (patterns) of features refused by name, and the feature.
_REFUSED_KEYS = (
    (re.compile(r"^(dist_token|head_dist\.)"), "distillation token"),
    (re.compile(r"^attn_pool\.([qk]_norm|pos_embed)"), "attention pooling"),
    (re.compile(r"(^|\.)rope\."), "rotary position embeddings"),
    (re.compile(r"^patch_embed\.backbone\."), "hybrid ResNet"),
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


def implicit_model_args(architecture):
    """The model_args that timm's architecture `architecture` (config.json's
    name) sets and a state dict does not show: act_layer ('quick_gelu' for
    OpenAI CLIP's, 'gelu_tanh' for `GELU_TANH_ARCHITECTURES`), the LayerNorm
    epsilon of CLIP's towers (keras_vit's key 'layer_norm_epsilon', timm's is a
    norm_layer), no_embed_class for DeiT III and DINOv2 with registers.
    config.json's own model_args win over these."""
    name = str(architecture or "")
    implicit = {}
    if "quickgelu" in name:
        implicit["act_layer"] = "quick_gelu"
    elif name in GELU_TANH_ARCHITECTURES:
        implicit["act_layer"] = "gelu_tanh"
    if "_clip_" in name:
        implicit["layer_norm_epsilon"] = CLIP_LAYER_NORM_EPSILON
    if name.startswith("deit3_") or re.search(r"_reg\d+_dinov2", name):
        implicit["no_embed_class"] = True
    if re.search(r"eva02|dinov3|_rope_", name):
        implicit["rope"] = True
    return implicit


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
        grid_size, and the family's options `keras_vit.families`), read(model) ->
        {official name: array} for the model's heads, and the sizes
        (patch_size, hidden_size, mlp_dim, num_heads, num_layers) where the heads
        are known (config.json's model_args, else `sizes.published_heads`), else
        None. The metadata's 'sizes' holds them too (num_heads None where unknown),
        and its 'undetermined' what neither the file nor every published model of
        its shape says (`sizes.require_determined`).
    Raises:
        RefusedFeatureError: a feature keras_vit does not compute (named).
        CheckpointError: not a timm ViT (its first keys named), unknown keys,
            sizes that disagree with `arch` (named).
    """
    architecture = (config or {}).get("architecture")
    model_args = {**implicit_model_args(architecture), **config_model_args(config)}
    _check_keys(origin, state, model_args, config)
    has_cls = "cls_token" in state
    attention_pool = "attn_pool.latent" in state
    fc_norm = "fc_norm.weight" in state
    final_norm = "norm.weight" in state or fc_norm  # timm's final_norm=False: neither
    pool = _global_pool(config, model_args, has_cls, fc_norm, attention_pool)
    if pool == "map" and (has_cls or not attention_pool):
        refuse(
            origin,
            "attention pooling",
            "global_pool='map' with a class token" if has_cls else "global_pool='map'",
        )
    if pool not in ("token", "avg", "map"):
        refuse(origin, "pooling", f"global_pool={pool!r}")
    undetermined = {}
    if config is None:  # a bare state dict: what its shape says, where it says it
        model_args, undetermined = _inferred_model_args(state, pool)
        if not final_norm and has_cls and not attention_pool:
            undetermined["classifier"] = (
                "without config.json and without a final LayerNorm, its pooling is not "
                "shown: timm's final_norm=False model pools the class token "
                "(classifier='token') or the patches' mean (classifier='token_gap')"
            )
    act = model_args.get("act_layer")
    if act not in ACTIVATIONS:
        refuse(origin, "activation", f"act_layer={act!r}")
    _check_sizes(origin, state, model_args, arch)
    no_embed_class = _no_embed_class(state, model_args)
    registers = int(state["reg_token"].shape[1]) if "reg_token" in state else 0
    if registers and not no_embed_class:
        refuse(
            origin,
            "position embeddings on register tokens",
            "key 'reg_token'",  # beside a pos_embed with rows for the prefix tokens
        )
    grid, patch = _grid(state, model_args, has_cls, no_embed_class)
    if has_cls:  # the class token, read (token) or left out of the mean (avg)
        classifier = "token_gap" if pool == "avg" else "token"
    else:
        classifier = "map" if pool == "map" else "gap"
    meta = {
        "classifier": classifier,
        "channels": int(state["patch_embed.proj.weight"].shape[1]),
        "representation_size": (
            int(state["pre_logits.fc.weight"].shape[0]) if "pre_logits.fc.weight" in state else None
        ),
        "approximate_gelu": ACTIVATIONS[act],
        "layer_norm_epsilon": float(model_args.get("layer_norm_epsilon", TIMM_LAYER_NORM_EPSILON)),
        "fc_norm": fc_norm,
        "layer_scale_init": (
            float(model_args.get("init_values") or 1e-5) if "blocks.0.ls1.gamma" in state else None
        ),
        "num_registers": registers,
        # A class token without its own row: timm's no_embed_class (DeiT III, DINOv2-reg).
        "position_embedding_for_class_token": not (has_cls and no_embed_class),
        "pre_norm": "norm_pre.weight" in state,
        "quick_gelu": act == "quick_gelu",
        "patch_embedding_bias": "patch_embed.proj.bias" in state,
        "patch_embedding_norm": "patch_embed.norm.weight" in state,
        "qk_norm": "blocks.0.attn.q_norm.weight" in state,
        "final_norm": final_norm,
        "preprocessing": preprocessing_of(origin, config),
        "posemb_resize": TIMM,  # timm's resample_abs_pos_embed
    }
    if "head.weight" in state:
        meta["num_classes"] = int(state["head.weight"].shape[0])
    if grid is not None:
        meta["grid_size"] = grid
        meta["image_size"] = (grid[0] * patch[0], grid[1] * patch[1])
    hidden = int(state["patch_embed.proj.weight"].shape[0])
    heads = model_args.get("num_heads")
    if heads is None:
        heads = sizes_lib.published_heads(hidden, has_cls, architecture)
    if heads is None:
        undetermined["num_heads"] = (
            f"its {hidden}-wide attention's heads are in no config.json beside it, and "
            + (
                f"no published timm ViT with a class token is {hidden} wide"
                if has_cls
                else f"timm's {hidden}-wide ViTs without a class token disagree or are none "
                "(768: SigLIP's 12 heads, vit_base_patch16_gap_224's 16)"
            )
        )
    shown = {
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "hidden_size": hidden,
        "mlp_dim": int(state["blocks.0.mlp.fc1.weight"].shape[0]),
        "num_heads": None if heads is None else int(heads),
        "num_layers": num_blocks(state),
    }
    meta["sizes"] = shown
    if undetermined:  # no value stands for what the file does not say
        meta = {k: v for k, v in meta.items() if k not in undetermined}
        meta[sizes_lib.UNDETERMINED] = undetermined
    sizes = shown if heads is not None else None
    recorded_heads = model_args.get("num_heads")

    def read(model):
        # The heads only where config.json says them: otherwise the model's (what its
        # caller gave, or what every published model of the width has) split the file.
        inferred = {"num_heads": None if recorded_heads is not None else heads}
        sizes_lib.check_fits(origin, {**shown, "num_heads": recorded_heads}, model, inferred)
        class_row = no_embed_class and getattr(model, "position_embedding_for_class_token", True)
        return to_params(state, model.num_heads, class_row)

    return meta, read, sizes


def to_params(state, num_heads, no_embed_class=False):
    """A timm ViT state dict (checked by `open_state`) as official arrays, for a
    model of `num_heads` heads. `no_embed_class`: the position embeddings leave
    out the class token (timm's no_embed_class) and the model has a row for it,
    which then gets zeros: adding nothing to it computes the same. (A model
    built with position_embedding_for_class_token=False takes the rows as they
    are.)"""
    params = {"embedding/kernel": torch_layout.kernel_from_conv(state["patch_embed.proj.weight"])}
    if "patch_embed.proj.bias" in state:
        params["embedding/bias"] = state["patch_embed.proj.bias"]
    posemb = state["pos_embed"]
    if "cls_token" in state:
        params["cls"] = state["cls_token"]
        if no_embed_class:
            posemb = np.concatenate([np.zeros_like(posemb[:, :1]), posemb], axis=1)
    if "reg_token" in state:
        params["Transformer/registers"] = state["reg_token"]
    params["Transformer/posembed_input/pos_embedding"] = posemb
    for module, name in _TOP_NORMS.items():
        if f"{module}.weight" in state:
            params[f"{name}/scale"] = state[f"{module}.weight"]
            params[f"{name}/bias"] = state[f"{module}.bias"]
    for index in range(num_blocks(state)):
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
        for key, name in _LAYER_SCALES.items():
            if prefix + key in state:
                params[f"{torch_layout.block_prefix(index)}{name}/scale"] = state[prefix + key]
        for module, name in _QK_NORMS.items():
            if f"{prefix}{module}.weight" in state:
                name = f"{torch_layout.block_prefix(index)}{_ATTENTION}{name}"
                params[f"{name}/scale"] = state[f"{prefix}{module}.weight"]
                params[f"{name}/bias"] = state[f"{prefix}{module}.bias"]
    if "attn_pool.latent" in state:
        params.update(_attention_pool_params(state, num_heads))
    params.update(
        torch_layout.dense_params(state, (("pre_logits.fc", "pre_logits"), ("head", "head")))
    )
    return params


def _attention_pool_params(state, num_heads):
    """timm's AttentionPoolLatent (one latent) as big_vision's MAPHead arrays."""
    p = _ATTN_POOL
    width = state[f"{p}q.weight"].shape[0]
    key, value = np.split(state[f"{p}kv.weight"], 2, axis=0)
    kv_bias = state.get(f"{p}kv.bias")
    key_bias, value_bias = np.split(kv_bias, 2) if kv_bias is not None else (None, None)
    parts = {
        "query": (state[f"{p}q.weight"], state.get(f"{p}q.bias")),
        "key": (key, key_bias),
        "value": (value, value_bias),
    }
    params = {f"{MAP_HEAD}probe": state[f"{p}latent"]}
    for role, (weight, bias) in parts.items():
        kernel = np.asarray(weight).T.reshape(width, num_heads, -1)
        bias = np.zeros(weight.shape[0], np.float32) if bias is None else np.asarray(bias)
        name = f"{MAP_HEAD}MultiHeadDotProductAttention_0/{role}"
        params[f"{name}/kernel"], params[f"{name}/bias"] = kernel, bias.reshape(num_heads, -1)
    for module, name in _ATTN_POOL_MODULES.items():
        weight, bias = state[f"{p}{module}.weight"], state[f"{p}{module}.bias"]
        if module == "norm":
            params[f"{MAP_HEAD}{name}/scale"], params[f"{MAP_HEAD}{name}/bias"] = weight, bias
            continue
        kernel = np.asarray(weight).T
        if module == "proj":
            kernel = kernel.reshape(num_heads, -1, kernel.shape[-1])
        params[f"{MAP_HEAD}{name}/kernel"], params[f"{MAP_HEAD}{name}/bias"] = kernel, bias
    return params


def from_params(params):
    """Official arrays (`keras_vit.checkpoint.layout.model_params`, a plain ViT's
    or one of the families') as a timm state dict: the inverse of `to_params`.
    Registers with a class token that has a position embedding (transformers'
    DINOv2 with registers) are written as timm converts DINOv2's own files: the
    class token's row added to the class token, the rest as no_embed_class."""
    state = {"patch_embed.proj.weight": torch_layout.conv_from_kernel(params["embedding/kernel"])}
    if "embedding/bias" in params:
        state["patch_embed.proj.bias"] = params["embedding/bias"]
    posemb = params["Transformer/posembed_input/pos_embedding"]
    if "cls" in params:
        state["cls_token"] = params["cls"]
        if "Transformer/registers" in params and _has_class_row(params):
            state["cls_token"] = params["cls"] + posemb[:, :1]
            posemb = posemb[:, 1:]
    if "Transformer/registers" in params:
        state["reg_token"] = params["Transformer/registers"]
    state["pos_embed"] = posemb
    for module, name in _TOP_NORMS.items():
        if f"{name}/scale" in params:
            state[f"{module}.weight"] = params[f"{name}/scale"]
            state[f"{module}.bias"] = params[f"{name}/bias"]
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
        for key, name in _LAYER_SCALES.items():
            scale = params.get(f"{torch_layout.block_prefix(index)}{name}/scale")
            if scale is not None:
                state[prefix + key] = scale
        for module, name in _QK_NORMS.items():
            name = f"{torch_layout.block_prefix(index)}{_ATTENTION}{name}"
            if f"{name}/scale" in params:
                state[f"{prefix}{module}.weight"] = params[f"{name}/scale"]
                state[f"{prefix}{module}.bias"] = params[f"{name}/bias"]
    if f"{MAP_HEAD}probe" in params:
        state.update(_attention_pool_state(params))
    if "head/kernel" in params:
        weight, bias = torch_layout.linear_from_dense(params["head/kernel"], params["head/bias"])
        state["head.weight"], state["head.bias"] = weight, bias
    return state


def _has_class_row(params):
    """Whether the position embeddings have a row for the class token (one more
    than a square grid's; DINOv2's, the original ViT's)."""
    rows = params["Transformer/posembed_input/pos_embedding"].shape[1]
    return "cls" in params and is_square(rows - 1) and not is_square(rows)


def _attention_pool_state(params):
    """big_vision's MAPHead arrays as timm's AttentionPoolLatent: the inverse of
    `_attention_pool_params`."""
    p, attention = _ATTN_POOL, f"{MAP_HEAD}MultiHeadDotProductAttention_0/"
    state = {f"{p}latent": params[f"{MAP_HEAD}probe"]}

    def linear(name):
        kernel = np.asarray(params[f"{attention}{name}/kernel"])
        return kernel.reshape(kernel.shape[0], -1).T, np.asarray(params[f"{attention}{name}/bias"])

    (q, qb), (k, kb), (v, vb) = (linear(name) for name in ("query", "key", "value"))
    state[f"{p}q.weight"], state[f"{p}q.bias"] = q, qb.reshape(-1)
    state[f"{p}kv.weight"] = np.concatenate([k, v])
    state[f"{p}kv.bias"] = np.concatenate([kb.reshape(-1), vb.reshape(-1)])
    for module, name in _ATTN_POOL_MODULES.items():
        if module == "norm":
            state[f"{p}norm.weight"] = params[f"{MAP_HEAD}{name}/scale"]
            state[f"{p}norm.bias"] = params[f"{MAP_HEAD}{name}/bias"]
            continue
        kernel = np.asarray(params[f"{MAP_HEAD}{name}/kernel"])
        kernel = kernel.reshape(-1, kernel.shape[-1])
        state[f"{p}{module}.weight"] = kernel.T
        state[f"{p}{module}.bias"] = params[f"{MAP_HEAD}{name}/bias"]
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
    token = has_class_token(model.classifier)
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
        "global_pool": {"token": "token", "gap": "avg", "map": "map", "token_gap": "avg"}[
            model.classifier
        ],
        "class_token": token,
        "fc_norm": bool(getattr(model, "fc_norm", False)),
        "act_layer": (
            "quick_gelu"
            if getattr(model, "quick_gelu", False)
            else ("gelu_tanh" if getattr(model, "approximate_gelu", True) else "gelu")
        ),
    }
    registers = int(getattr(model, "num_registers", 0))
    if registers:  # timm's reg_tokens are always without position embeddings here
        model_args["reg_tokens"] = registers
    if registers or (token and not getattr(model, "position_embedding_for_class_token", True)):
        model_args["no_embed_class"] = True
    if getattr(model, "layer_scale_init", None) is not None:
        model_args["init_values"] = float(model.layer_scale_init)
    clip = float(model.layer_norm_epsilon) == CLIP_LAYER_NORM_EPSILON
    model_args["pre_norm"] = bool(getattr(model, "pre_norm", False))
    if getattr(model, "qk_norm", False):
        model_args["qk_norm"] = True
    if getattr(model, "patch_embedding_norm", False):  # timm's LayerNorm: epsilon 1e-6
        model_args["embed_norm_layer"] = "layernorm"
    if not getattr(model, "final_norm", True):
        model_args["final_norm"] = False
    architecture = TIMM_NAMES.get(variant_name(arch), DEFAULT_NAME)
    if clip:  # the architecture whose norm_layer has CLIP's epsilon
        quick = getattr(model, "quick_gelu", False)
        architecture = CLIP_QUICKGELU_ARCHITECTURE if quick else CLIP_ARCHITECTURE
    return written_config(model, architecture, model_args, num_classes, hidden, (height, width))


def written_config(model, architecture, model_args, num_classes, hidden, image_size):
    """The config.json timm reads beside a written state dict: `architecture` built with
    `model_args`, and the pretrained_cfg of `model` (its input size (height, width),
    channels and normalisation)."""
    mean, std = mean_std(getattr(model, "preprocessing", None), int(model.channels))
    return {
        "architecture": architecture,
        "num_classes": num_classes,
        "num_features": hidden,
        "global_pool": model_args["global_pool"],
        "model_args": model_args,
        "pretrained_cfg": {
            "input_size": [int(model.channels), *image_size],
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
    if epsilon not in (TIMM_LAYER_NORM_EPSILON, CLIP_LAYER_NORM_EPSILON):
        raise CheckpointError(
            f"{name}: layer_norm_epsilon={epsilon}: timm's ViT LayerNorms use "
            f"{TIMM_LAYER_NORM_EPSILON} (its CLIP towers {CLIP_LAYER_NORM_EPSILON})."
        )
    if getattr(model, "patch_embedding_norm", False) and epsilon != TIMM_LAYER_NORM_EPSILON:
        raise CheckpointError(
            f"{name}: patch_embedding_norm with layer_norm_epsilon={epsilon}: timm's "
            f"embed_norm_layer 'layernorm' has epsilon {TIMM_LAYER_NORM_EPSILON}."
        )
    pre_norm = bool(getattr(model, "pre_norm", False))
    if bool(getattr(model, "patch_embedding_bias", True)) == pre_norm:
        raise CheckpointError(
            f"{name}: patch_embedding_bias={not pre_norm} with pre_norm={pre_norm}: timm's "
            "patch embedding has a bias exactly when its ViT has no pre-norm."
        )
    hidden, mlp_dim = int(model.hidden_size), int(model.mlp_dim)
    if int(hidden * (mlp_dim / hidden)) != mlp_dim:
        raise CheckpointError(
            f"{name}: mlp_dim={mlp_dim} is not int(hidden_size * mlp_ratio) for any "
            f"mlp_ratio timm can be given (hidden_size {hidden})."
        )


def preprocessing_of(origin, config):
    """The input normalisation config.json's `pretrained_cfg` states (mean and std
    on the [0, 1] scale), checked; None where it states none or the authors'."""
    pretrained = (config or {}).get("pretrained_cfg") or {}
    if "mean" not in pretrained or "std" not in pretrained:
        return None
    return state_dict.checked_preprocessing(
        pretrained["mean"], pretrained["std"], f"{origin}: config.json pretrained_cfg"
    )


def config_model_args(config):
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
        ("rope", "rotary position embeddings", lambda v: bool(v)),
        ("patch_drop_rate", "patch dropout", lambda v: bool(v)),
        ("embed_norm_layer", "patch-embedding norm", lambda v: v not in EMBED_NORMS),
        ("scale_attn_norm", "scaled norms", lambda v: bool(v)),
        ("scale_mlp_norm", "scaled norms", lambda v: bool(v)),
        ("pos_embed", "no learned position embedding", lambda v: v != "learn"),
    ):
        if arg in model_args and refused(model_args[arg]):
            refuse(origin, feature, f"config.json model_args {arg}={model_args[arg]!r}")
    if "pos_embed" not in state:
        refuse(origin, "no learned position embedding", "no 'pos_embed'")
    known = {f"{module}.{part}" for module in _TOP_MODULES for part in ("weight", "bias")}
    known.update(_TOP_TENSORS)
    unknown = []
    for key in state:
        m = BLOCK.match(key)
        if key in known:
            continue
        if (
            m
            and m.group(2).rpartition(".")[0] in _BLOCK_MODULES
            and key.endswith((".weight", ".bias"))
        ):
            continue
        if m and m.group(2) in _LAYER_SCALES:
            continue
        if m and m.group(2).rpartition(".")[0] in _QK_NORMS:
            continue
        if key in _ATTN_POOL_KEYS:
            continue
        unknown.append(key)
    if unknown:
        shown = ", ".join(unknown[:8]) + (
            f", ... ({len(unknown) - 8} more)" if len(unknown) > 8 else ""
        )
        raise CheckpointError(
            f"{origin}: {len(unknown)} keys that timm's plain ViT does not have: {shown}."
        )
    fc1, fc2 = state.get("blocks.0.mlp.fc1.weight"), state.get("blocks.0.mlp.fc2.weight")
    if fc1 is not None and fc2 is not None and fc1.shape[0] != fc2.shape[1]:
        refuse(  # timm's SwiGLUPacked: fc1 holds the gate and the value (DINOv2 giant)
            origin,
            "gated MLP",
            f"'blocks.0.mlp.fc1.weight' {tuple(fc1.shape)} and 'blocks.0.mlp.fc2.weight' "
            f"{tuple(fc2.shape)}",
        )
    blocks = num_blocks(state)
    for index in range(blocks):
        for module in _BLOCK_MODULES:
            if f"blocks.{index}.{module}.weight" not in state:
                raise CheckpointError(f"{origin}: key 'blocks.{index}.{module}.weight' is missing.")
    if "attn_pool.latent" in state:
        if state["attn_pool.latent"].shape[1] != 1:
            refuse(
                origin,
                "attention pooling",
                f"'attn_pool.latent' of {state['attn_pool.latent'].shape[1]} latent tokens",
            )
        required = [k for k in _ATTN_POOL_KEYS if k.endswith(".weight") or k.endswith("latent")]
        for key in required:
            if key not in state:
                raise CheckpointError(f"{origin}: key '{key}' is missing.")
    for module in ("norm", "fc_norm", "head", "pre_logits.fc", "norm_pre"):
        has_weight, has_bias = f"{module}.weight" in state, f"{module}.bias" in state
        if has_weight != has_bias:
            missing = f"{module}.bias" if has_weight else f"{module}.weight"
            raise CheckpointError(f"{origin}: key '{missing}' is missing.")
    _check_new_norms(origin, state, model_args, blocks)


def _check_new_norms(origin, state, model_args, blocks):
    """The patch-embedding norm and qk_norm as keras_vit computes them: LayerNorms
    (weight and bias; an RMSNorm's weight alone is refused, naming its key) of
    timm's epsilon, q_norm and k_norm in every block or in none."""
    epsilon = float(model_args.get("layer_norm_epsilon", TIMM_LAYER_NORM_EPSILON))
    embed_norm = [f"patch_embed.norm.{part}" for part in ("weight", "bias")]
    present = [key for key in embed_norm if key in state]
    if present and present != embed_norm:
        refuse(origin, "patch-embedding norm", f"key '{present[0]}'")
    if present and epsilon != TIMM_LAYER_NORM_EPSILON:  # timm's 'layernorm' has 1e-6
        refuse(origin, "patch-embedding norm", f"beside LayerNorms of epsilon {epsilon}")
    with_qk = []
    for index in range(blocks):
        keys = [f"blocks.{index}.{m}.{part}" for m in _QK_NORMS for part in ("weight", "bias")]
        present = [key for key in keys if key in state]
        if present and present != keys:
            refuse(origin, "qk_norm", f"key '{present[0]}'")
        if present:
            with_qk.append(index)
    if with_qk and len(with_qk) != blocks:
        refuse(origin, "qk_norm", f"q_norm and k_norm in blocks {with_qk} of {blocks} alone")


def num_blocks(state):
    """How many blocks a timm state dict holds (its highest `BLOCK` index + 1)."""
    indices = {int(m.group(1)) for key in state if (m := BLOCK.match(key))}
    return max(indices) + 1 if indices else 0


def _global_pool(config, model_args, has_cls, fc_norm, attention_pool):
    """timm's global_pool: config.json's, else what timm's defaults give the keys
    (fc_norm defaults to global_pool == 'avg'; attn_pool is global_pool 'map')."""
    for source in (model_args, config or {}):
        if source.get("global_pool") is not None:
            return source["global_pool"]
    if attention_pool:
        return "map"
    if not has_cls or fc_norm:
        return "avg"
    return "token"


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
        expected = sizes_lib.given_size(arch, key)
        if value is not None and expected is not None and int(value) != int(expected):
            raise CheckpointError(
                f"{origin}: its config.json records {key} {value}, the model has {expected}."
            )


def _inferred_model_args(state, pool):
    """For a bare state dict (no config.json): the model_args that every timm
    architecture of its shape sets (timm 1.0's vision_transformer.py and deit.py),
    and the arguments they disagree on (argument -> why). A CLIP tower's shape (a
    norm_pre, no patch-embedding bias: every timm ViT with pre_norm=True has
    LayerNorm epsilon 1e-5) leaves QuickGELU open; a model without a class token
    leaves the GELU's form open (the SigLIP 2-era towers use the tanh form, SigLIP 1
    and vit_*_gap_* the erf form). Every other timm ViT of keras_vit's keys uses
    nn.GELU and epsilon 1e-6, timm's defaults."""
    args, undetermined = {}, {}
    if "norm_pre.weight" in state and "patch_embed.proj.bias" not in state:
        args["layer_norm_epsilon"] = CLIP_LAYER_NORM_EPSILON
        undetermined["quick_gelu"] = (
            "a CLIP tower's shape (norm_pre, no patch-embedding bias) without config.json: "
            "OpenAI's, MetaCLIP's and DFN's use QuickGELU (quick_gelu=True), LAION's the "
            "GELU (quick_gelu=False)"
        )
    elif "cls_token" not in state:
        undetermined["approximate_gelu"] = (
            f"a model without a class token (global_pool {pool!r}) and without config.json: "
            "timm's use the erf GELU (approximate_gelu=False: SigLIP 1, vit_*_gap_*) or the "
            "tanh form (approximate_gelu=True: the SigLIP 2-era towers)"
        )
    return args, undetermined


def _no_embed_class(state, model_args):
    """Whether the position embeddings leave out the class token (timm's
    no_embed_class: DeiT III, newer big_vision ports): config.json's word, else
    one row per patch of config.json's img_size, else a square number of rows."""
    prefix = int("cls_token" in state) + (
        int(state["reg_token"].shape[1]) if "reg_token" in state else 0
    )
    if not prefix:
        return False
    if model_args.get("no_embed_class") is not None:
        return bool(model_args["no_embed_class"])
    tokens = state["pos_embed"].shape[1]
    if model_args.get("img_size") is not None:
        kernel = state["patch_embed.proj.weight"]
        height, width = to_pair(model_args["img_size"], "img_size")
        return tokens == (height // kernel.shape[2]) * (width // kernel.shape[3])
    return is_square(tokens) and not is_square(tokens - prefix)


def _grid(state, model_args, has_cls, no_embed_class):
    """(rows, cols) of the position embeddings and the (ph, pw) patch: from
    config.json's img_size where it says, else a square grid, else (None, patch)."""
    kernel = state["patch_embed.proj.weight"]
    patch = (int(kernel.shape[2]), int(kernel.shape[3]))
    if model_args.get("img_size") is not None:
        height, width = to_pair(model_args["img_size"], "img_size")
        return (height // patch[0], width // patch[1]), patch
    tokens = state["pos_embed"].shape[1]
    if has_cls and not no_embed_class:
        tokens -= 1
    if not is_square(tokens):
        return None, patch
    side = int(round(np.sqrt(tokens)))
    return (side, side), patch
