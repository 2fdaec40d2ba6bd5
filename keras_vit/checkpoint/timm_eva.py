"""timm's `Eva` ViTs (`timm.models.eva`): EVA-02, the RoPE-ViTs of Heo et al.
(axial and mixed), DINOv3 (and LingBot-Vision, its layout), EVA-01 and timm's
own `vit_*_rope_reg*_gap_256`, read into keras_vit's official names.

Layout (a state dict; the keys beside the plain timm ViT's, `timm_format`):

    cls_token, reg_token (1, R, D)          cls, Transformer/registers (DINOv3's
                                            storage tokens, after the class token)
    pos_embed (1, [1 +] N, D)               .../posembed_input/pos_embedding; absent:
                                            none (absolute_position_embedding=False)
    patch_embed.proj, norm_pre              embedding, Transformer/encoder_prenorm
    blocks.{i}.norm1, .norm2                .../LayerNorm_0, LayerNorm_2
    blocks.{i}.attn.qkv (3D, D)             .../query, key, value: with .attn.qkv.bias
                                            (AttentionRope), .attn.q_bias and .v_bias
                                            (EvaAttention: no key bias) or no bias
    blocks.{i}.attn.q_proj, k_proj, v_proj  the same, unfused (EVA-02 base, large)
    blocks.{i}.attn.q_norm, .k_norm         .../query_norm, key_norm (qk_norm)
    blocks.{i}.attn.proj                    .../out
    blocks.{i}.gamma_1, .gamma_2 (D,)       .../LayerScale_1/scale, LayerScale_3/scale
    blocks.{i}.mlp.fc1 (M or 2M, D)         .../MlpBlock_3/Dense_0: M for the GELU MLP;
                                            2M, gate first, for the packed SwiGLU
                                            (GluMlp, gate_last=False)
    blocks.{i}.mlp.fc1_g, .fc1_x (M, D)     .../Dense_0 as [gate, value] (split SwiGLU)
    blocks.{i}.mlp.norm (M,)                .../MlpBlock_3/norm (EVA-02's scale_mlp)
    blocks.{i}.mlp.fc2                      .../MlpBlock_3/Dense_1
    rope.freqs (2, depth, heads, hd/2)      .../encoderblock_{i}/MultiHeadDotProductAttention_1/
                                            rope/frequencies, [:, i] (RoPE-ViT-Mixed)
    norm, fc_norm, head                     Transformer/encoder_norm, fc_norm, head

What the keys cannot say (the rotary form, the LayerNorm epsilon, the pooling) is
each architecture's (`ARCHITECTURES`: timm 1.0.31's eva.py), named by config.json
where there is one (its model_args and global_pool win), else by the file's name or
a folder's above it where exactly one family is named there
('vit_small_patch16_dinov3_qkvb.safetensors', huggingface_hub's
'models--timm--<model>.<tag>/snapshots/...': `hub_names.model_names`; keys of
another family are an error naming both), else by the key pattern that only those
architectures have (`_bare_architecture`); where architectures of one key pattern
disagree (DINOv3's _qkvb models and LingBot-Vision: the pooling), the argument is
undetermined and named.
"""

import re

import numpy as np

from keras_vit.checkpoint import hub_names, timm_format, torch_layout
from keras_vit.checkpoint import sizes as sizes_lib
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.refused import refuse
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TIMM
from keras_vit.layers.rotary import rope_spec

# The families of eva.py keras_vit computes, each as (name pattern, what the
# architecture sets that its keys do not show). 'rope': the rotary form (None: none);
# 'epsilon': its LayerNorms'; 'pool': its default global_pool.
_EVA02 = dict(
    rope={"kind": "axial", "temperature": 10000.0, "reference_grid": [16, 16]},
    epsilon=1e-6,
    pool="avg",
)
ARCHITECTURES = (
    (re.compile(r"^vit_.+_dinov3"), dict(rope={"kind": "dinov3"}, epsilon=1e-5, pool="avg")),
    (re.compile(r"^vit_.+_lingbot"), dict(rope={"kind": "dinov3"}, epsilon=1e-5, pool="token")),
    (re.compile(r"^vit_.+_rope_mixed"), dict(rope={"kind": "mixed"}, epsilon=1e-6, pool="token")),
    (
        re.compile(r"^vit_.+_rope_(ape_)?\d+$"),
        dict(
            rope={"kind": "axial", "temperature": 100.0, "grid_indexing": "xy"},
            epsilon=1e-6,
            pool="token",
        ),
    ),
    (re.compile(r"^vit_.+_rope_reg\d+_gap"), _EVA02),  # timm's own: EVA-02's RoPE
    (re.compile(r"^eva02_(?!.*clip)"), _EVA02),
    (re.compile(r"^eva_giant_patch14_\d+$"), dict(rope=None, epsilon=1e-6, pool="avg")),
)
_READ = "EVA-02, RoPE-ViT, DINOv3, LingBot, EVA-01"  # ARCHITECTURES, as messages name them
# eva.py's architectures keras_vit refuses, by name: what they compute otherwise.
REFUSED_ARCHITECTURES = (
    (re.compile(r"^vit_pe_"), "rotary position embeddings", "Perception Encoder"),
    (re.compile(r"_sapiens2"), "grouped-query attention", "Sapiens2"),
    (re.compile(r"^eva.*_clip_"), "scaled norms", "EVA-CLIP"),
)
# The heads of eva.py's architectures keras_vit reads, by width (64 channels a head,
# vit_7b's 128).
EVA_HEADS = {192: 3, 384: 6, 512: 8, 640: 10, 768: 12, 1024: 16, 1280: 20, 1408: 16, 1536: 24}
EVA_HEADS[4096] = 32

_BLOCK_KEYS = re.compile(
    r"^(norm[12]\.(weight|bias)|attn\.(qkv|proj|[qkv]_proj)\.(weight|bias)|attn\.[qv]_bias"
    r"|attn\.[qk]_norm\.(weight|bias)|gamma_[12]|mlp\.(fc1|fc1_g|fc1_x|fc2|norm)\.(weight|bias))$"
)
_TOP_KEYS = {
    "cls_token",
    "reg_token",
    "pos_embed",
    "rope.freqs",
    *(
        f"{module}.{part}"
        for module in ("patch_embed.proj", "norm_pre", "norm", "fc_norm", "head")
        for part in ("weight", "bias")
    ),
}
# Keys of features refused by name, and the feature.
_REFUSED_KEYS = (
    (re.compile(r"^attn_pool\."), "attention pooling"),
    (re.compile(r"\.attn\.norm\.|\.attn\.gate\."), "scaled norms"),
    (re.compile(r"^patch_embed\.norm\."), "patch-embedding norm"),
    (re.compile(r"^patch_embed\.backbone\."), "hybrid ResNet"),
)


def claims(state, config=None):
    """Whether a timm state dict (and its config.json, or None) is one of eva.py's:
    its architecture's name, else a key only eva.py's blocks have (LayerScale
    'gamma_1', EvaAttention's 'q_bias', unfused 'q_proj', SwiGLU 'fc1_g', the
    mixed RoPE's 'rope.freqs')."""
    name = _name(config)
    if name:
        return any(p.search(name) for p, _ in ARCHITECTURES) or any(
            p.search(name) for p, _, _ in REFUSED_ARCHITECTURES
        )
    return "rope.freqs" in state or any(
        re.match(r"^blocks\.0\.(gamma_1|attn\.q_bias|attn\.q_proj\.weight|mlp\.fc1_g\.weight)$", k)
        for k in state
    )


def open_state(origin, state, config=None, arch=None):
    """What an eva.py state dict records, and how to read it: as
    `timm_format.open_state`, (metadata, read, sizes).

    Raises:
        RefusedFeatureError: a feature keras_vit does not compute (named).
        CheckpointError: unknown or missing keys, sizes that disagree (named).
    """
    name = _name(config)
    for pattern, feature, family in REFUSED_ARCHITECTURES:
        if name and pattern.search(name):
            refuse(origin, feature, f"{family}: config.json architecture {name!r}")
    _check_keys(origin, state)
    model_args = timm_format.config_model_args(config)
    if model_args.get("num_kv_heads"):
        refuse(
            origin,
            "grouped-query attention",
            f"model_args num_kv_heads={model_args['num_kv_heads']}",
        )
    family, undetermined = _family(origin, state, name)
    rope = _rope(origin, state, family, model_args)
    has_cls = "cls_token" in state
    pool = (config or {}).get("global_pool") or model_args.get("global_pool") or family["pool"]
    if "pool" in undetermined and (config or {}).get("global_pool"):
        undetermined.pop("pool")
    if pool not in ("token", "avg"):
        refuse(origin, "pooling", f"global_pool={pool!r}")
    fc_norm, norm = "fc_norm.weight" in state, "norm.weight" in state
    if not fc_norm and not norm:
        refuse(origin, "no final LayerNorm", "neither 'norm' nor 'fc_norm'")
    if fc_norm and norm:
        raise CheckpointError(f"{origin}: both 'norm' and 'fc_norm': keras_vit has one of them.")
    registers = int(state["reg_token"].shape[1]) if "reg_token" in state else 0
    hidden = int(state["patch_embed.proj.weight"].shape[0])
    patch = tuple(int(p) for p in state["patch_embed.proj.weight"].shape[2:])
    grid, for_prefix = _position_grid(origin, state, model_args, has_cls, registers, patch)
    meta = {
        "classifier": ("token" if pool == "token" else "token_gap") if has_cls else "gap",
        "channels": int(state["patch_embed.proj.weight"].shape[1]),
        "representation_size": None,
        "approximate_gelu": False,  # nn.GELU
        "layer_norm_epsilon": float(family["epsilon"]),
        "fc_norm": fc_norm,
        "layer_scale_init": (
            float(model_args.get("init_values") or 1e-5) if "blocks.0.gamma_1" in state else None
        ),
        "num_registers": registers,
        "position_embedding_for_class_token": for_prefix,
        "pre_norm": "norm_pre.weight" in state,
        "quick_gelu": False,
        "patch_embedding_bias": "patch_embed.proj.bias" in state,
        "absolute_position_embedding": "pos_embed" in state,
        "rope": rope_spec(rope),
        "qk_norm": "blocks.0.attn.q_norm.weight" in state,
        "gated_mlp": _gated(state),
        "mlp_norm": "blocks.0.mlp.norm.weight" in state,
        "preprocessing": timm_format.preprocessing_of(origin, config),
        "posemb_resize": TIMM,
    }
    if "head.weight" in state:
        meta["num_classes"] = int(state["head.weight"].shape[0])
    if grid is not None:
        meta["grid_size"] = grid
        meta["image_size"] = (grid[0] * patch[0], grid[1] * patch[1])
    heads = _heads(state, model_args, hidden)
    if heads is None:
        undetermined["num_heads"] = f"no eva.py architecture keras_vit reads is {hidden} wide"
    if "pool" in undetermined:
        undetermined["classifier"] = undetermined.pop("pool")
    dense_0 = _dense_0(state, 0)[0]
    gated = meta["gated_mlp"]
    shown = {
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "hidden_size": hidden,
        "mlp_dim": int(dense_0.shape[0] // (2 if gated else 1)),
        "num_heads": heads,
        "num_layers": timm_format.num_blocks(state),
    }
    meta["sizes"] = shown
    if undetermined:
        meta = {k: v for k, v in meta.items() if k not in undetermined}
        meta[sizes_lib.UNDETERMINED] = undetermined
    sizes = shown if heads is not None else None

    def read(model):
        sizes_lib.check_fits(origin, {**shown, "num_heads": None}, model, {"num_heads": heads})
        return to_params(state, model.num_heads)

    return meta, read, sizes


def to_params(state, num_heads):
    """An eva.py state dict (checked by `open_state`) as official arrays."""
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(state["patch_embed.proj.weight"]),
    }
    if "patch_embed.proj.bias" in state:
        params["embedding/bias"] = state["patch_embed.proj.bias"]
    for key, name in (("cls_token", "cls"), ("reg_token", "Transformer/registers")):
        if key in state:
            params[name] = state[key]
    if "pos_embed" in state:
        params["Transformer/posembed_input/pos_embedding"] = state["pos_embed"]
    for module, name in (
        ("norm_pre", "Transformer/encoder_prenorm"),
        ("norm", "Transformer/encoder_norm"),
        ("fc_norm", "fc_norm"),
    ):
        if f"{module}.weight" in state:
            params[f"{name}/scale"] = state[f"{module}.weight"]
            params[f"{name}/bias"] = state[f"{module}.bias"]
    params.update(torch_layout.dense_params(state, (("head", "head"),)))
    for index in range(timm_format.num_blocks(state)):
        params.update(_block_params(state, index, num_heads))
    return params


def _block_params(state, index, num_heads):
    stem = f"blocks.{index}."
    query, key, value = _projections(state, index)
    parts = {
        "norm_1": (state[stem + "norm1.weight"], state[stem + "norm1.bias"]),
        "query": query,
        "key": key,
        "value": value,
        "out": (state[stem + "attn.proj.weight"], state[stem + "attn.proj.bias"]),
        "norm_2": (state[stem + "norm2.weight"], state[stem + "norm2.bias"]),
        "dense_0": _dense_0(state, index),
        "dense_1": (state[stem + "mlp.fc2.weight"], state[stem + "mlp.fc2.bias"]),
    }
    params = torch_layout.block_params(index, parts, num_heads)
    prefix = torch_layout.block_prefix(index)
    attention = prefix + "MultiHeadDotProductAttention_1/"
    extras = (
        ("attn.q_norm", attention + "query_norm"),
        ("attn.k_norm", attention + "key_norm"),
        ("mlp.norm", prefix + "MlpBlock_3/norm"),
    )
    for module, name in extras:
        if f"{stem}{module}.weight" in state:
            params[f"{name}/scale"] = state[f"{stem}{module}.weight"]
            params[f"{name}/bias"] = state[f"{stem}{module}.bias"]
    if stem + "gamma_1" in state:
        params[prefix + "LayerScale_1/scale"] = state[stem + "gamma_1"]
        params[prefix + "LayerScale_3/scale"] = state[stem + "gamma_2"]
    if "rope.freqs" in state:
        params[attention + "rope/frequencies"] = np.asarray(state["rope.freqs"])[:, index]
    return params


def _projections(state, index):
    """(weight, bias) of the query, key and value of block `index`: split from the
    fused qkv, or the unfused q_proj, k_proj, v_proj; a bias absent: None (zero)."""
    stem = f"blocks.{index}.attn."
    if stem + "qkv.weight" in state:
        weights = np.split(np.asarray(state[stem + "qkv.weight"]), 3)
        if stem + "qkv.bias" in state:
            biases = np.split(np.asarray(state[stem + "qkv.bias"]), 3)
        elif stem + "q_bias" in state:  # EvaAttention: the key's bias is zero
            biases = [state[stem + "q_bias"], None, state[stem + "v_bias"]]
        else:
            biases = [None] * 3
        return tuple(zip(weights, biases))
    return tuple(
        (state[f"{stem}{p}_proj.weight"], state.get(f"{stem}{p}_proj.bias")) for p in "qkv"
    )


def _dense_0(state, index):
    """The MLP's first Linear (weight, bias); a split SwiGLU's fc1_g and fc1_x
    concatenated, the gate first (GluMlp's packed layout)."""
    stem = f"blocks.{index}.mlp."
    if stem + "fc1.weight" in state:
        return state[stem + "fc1.weight"], state[stem + "fc1.bias"]
    weight = np.concatenate([state[stem + "fc1_g.weight"], state[stem + "fc1_x.weight"]])
    bias = np.concatenate([state[stem + "fc1_g.bias"], state[stem + "fc1_x.bias"]])
    return weight, bias


def _gated(state):
    """Whether the MLPs are SwiGLUs: split (fc1_g), or packed (fc1 twice fc2's input)."""
    if "blocks.0.mlp.fc1_g.weight" in state:
        return True
    fc1, fc2 = state["blocks.0.mlp.fc1.weight"], state["blocks.0.mlp.fc2.weight"]
    return fc1.shape[0] == 2 * fc2.shape[1]


def _name(config):
    return str((config or {}).get("architecture") or "").partition(".")[0]


def _family(origin, state, name):
    """The architecture's settings (`ARCHITECTURES`) and what stays undetermined
    ({argument: why}): by config.json's name, else by the name of the file or of a
    folder above it (`_named_by_path`), checked against its keys, else by the keys
    alone (`_bare_architecture`)."""
    if name:
        family = _architecture(name)
        if family is None:
            raise CheckpointError(
                f"{origin}: config.json architecture {name!r} is none of timm's eva.py "
                f"families keras_vit reads ({_READ})."
            )
        return family, {}
    named = _named_by_path(origin)
    if named is None:
        return _bare_architecture(origin, state)
    name, family = named
    try:
        by_keys, undetermined = _bare_architecture(origin, state)
    except CheckpointError:  # a key pattern of no bare file: the name says it
        return family, {}
    if any(by_keys[k] != family[k] for k in by_keys if k not in undetermined):
        raise CheckpointError(
            f"{origin}: its path names timm's {name!r}, but its keys are of another eva.py "
            f"family ({_described(by_keys)}, not {_described(family)}); rename the file or "
            "put its config.json beside it."
        )
    return family, {}


def _architecture(name):
    """The settings of the first of `ARCHITECTURES` that matches the timm model `name`,
    or None."""
    return next((dict(family) for pattern, family in ARCHITECTURES if pattern.search(name)), None)


def _named_by_path(origin):
    """(name, settings) of the one eva.py family that the file's name or a folder's
    above it names (`hub_names.model_names`: 'vit_small_patch16_dinov3_qkvb.safetensors',
    huggingface_hub's 'models--timm--<model>.<tag>/snapshots/...'), else None: none,
    or names of two families."""
    named = {}
    for name in hub_names.model_names(origin):
        index = next((i for i, (p, _) in enumerate(ARCHITECTURES) if p.search(name)), None)
        if index is not None:
            named.setdefault(index, name)
    if len(named) != 1:
        return None
    ((index, name),) = named.items()
    return name, dict(ARCHITECTURES[index][1])


def _described(family):
    rope = family["rope"]["kind"] if family["rope"] else None
    return f"rope {rope!r}, epsilon {family['epsilon']}, global_pool {family['pool']!r}"


def _bare_architecture(origin, state):
    """What every eva.py architecture (timm 1.0.31) with a state dict of this key
    pattern sets: the pattern -> the family.

        rope.freqs                               RoPE-ViT-Mixed (class token pooling)
        attn.qkv.bias, a class token             RoPE-ViT-Axial (temperature 100, 'xy')
        storage tokens beside a class token,     DINOv3 (mean of the patches) or, with
        no pos_embed                             EvaAttention's q_bias, LingBot-Vision
                                                 (class token): the pooling undetermined
        pos_embed and a SwiGLU                   EVA-02 (reference grid 16 x 16)
        registers without a class token          vit_*_rope_reg*_gap_256 (EVA-02's RoPE)
        pos_embed, q_bias, a GELU MLP            EVA-01 (no RoPE)
    """
    has_cls, has_pos = "cls_token" in state, "pos_embed" in state
    registers = "reg_token" in state
    if "rope.freqs" in state:
        return dict(ARCHITECTURES[2][1]), {}
    if "blocks.0.attn.qkv.bias" in state and has_cls:
        return dict(ARCHITECTURES[3][1]), {}
    if registers and has_cls and not has_pos:
        family = dict(ARCHITECTURES[0][1])
        if "blocks.0.attn.q_bias" in state:
            return family, {
                "pool": "DINOv3's _qkvb models pool the mean of the patches "
                "(classifier='token_gap'), LingBot-Vision's of the same keys the class token "
                "(classifier='token'), and neither a config.json beside it nor its path "
                "names which (a file named after its architecture loads alone too: "
                "'vit_small_patch16_dinov3_qkvb.safetensors')"
            }
        return family, {}
    if has_pos and _gated(state):
        return dict(_EVA02), {}
    if registers and not has_cls and not has_pos:
        return dict(_EVA02), {}
    if has_pos and "blocks.0.attn.q_bias" in state:
        return dict(ARCHITECTURES[-1][1]), {}
    raise CheckpointError(
        f"{origin}: its keys are of timm's eva.py blocks but of no architecture keras_vit "
        "reads without its config.json (EVA-02, RoPE-ViT, DINOv3, EVA-01); put timm's "
        "config.json beside it, or name the file after its architecture."
    )


def _rope(origin, state, family, model_args):
    """The rotary option: the family's, with config.json's model_args over it."""
    if model_args.get("use_rot_pos_emb") is False:
        return None
    rope = family["rope"]
    if "rope.freqs" in state:
        rope = {"kind": "mixed"}
    if rope is None:
        if "pos_embed" not in state:
            refuse(origin, "no learned position embedding", "no 'pos_embed' and no rotary one")
        return None
    rope = dict(rope)
    kind = model_args.get("rope_type")
    if kind is not None:
        kinds = {"cat": "axial", "mixed": "mixed", "dinov3": "dinov3"}
        if kind not in kinds:
            refuse(origin, "rotary position embeddings", f"model_args rope_type={kind!r}")
        if kinds[kind] != rope["kind"]:
            rope = {"kind": kinds[kind]}
    for arg in ("rope_grid_offset", "rope_shift_coords", "rope_jitter_coords"):
        if model_args.get(arg):
            refuse(origin, "rotary position embeddings", f"model_args {arg}={model_args[arg]!r}")
    for arg, key in (
        ("rope_temperature", "temperature"),
        ("rope_grid_indexing", "grid_indexing"),
        ("rope_rotate_half", "rotate_half"),
        ("ref_feat_shape", "reference_grid"),
    ):
        if model_args.get(arg) is not None:
            rope[key] = model_args[arg]
    if isinstance(rope.get("reference_grid"), int):
        rope["reference_grid"] = [rope["reference_grid"]] * 2
    return rope


def _position_grid(origin, state, model_args, has_cls, registers, patch):
    """The grid of the learned position embeddings (None where there are none, or a
    config.json says no size), and whether the class token has a row of them."""
    if model_args.get("img_size") is not None:
        height, width = to_pair(model_args["img_size"], "img_size")
        grid = (height // patch[0], width // patch[1])
    else:
        grid = None
    if "pos_embed" not in state:
        return grid, True
    rows = int(state["pos_embed"].shape[1])
    prefix = int(has_cls) + registers
    side = int(round(np.sqrt(rows)))
    patches_alone = side * side == rows and (grid is None or grid[0] * grid[1] == rows)
    if not patches_alone and registers:
        refuse(origin, "position embeddings on register tokens", "key 'reg_token'")
    if grid is None:
        side = int(round(np.sqrt(rows if patches_alone else rows - prefix)))
        grid = (side, side)
    expected = grid[0] * grid[1] + (0 if patches_alone else prefix)
    if rows != expected:
        raise CheckpointError(
            f"{origin}: 'pos_embed' has {rows} rows, not a square grid "
            f"{'' if patches_alone else f'after {prefix} prefix rows'}."
        )
    return grid, not patches_alone


def _heads(state, model_args, hidden):
    if model_args.get("num_heads") is not None:
        return int(model_args["num_heads"])
    if "rope.freqs" in state:
        return int(state["rope.freqs"].shape[2])
    if "blocks.0.attn.q_norm.weight" in state:
        return hidden // int(state["blocks.0.attn.q_norm.weight"].shape[0])
    return EVA_HEADS.get(hidden)


def _check_keys(origin, state):
    """Refused features by key; then every key must be one of eva.py's blocks that
    keras_vit reads, and every block must have its parts."""
    for key in state:
        for pattern, feature in _REFUSED_KEYS:
            if pattern.search(key):
                refuse(origin, feature, f"key '{key}'")
    if "rope.freqs" in state and np.ndim(state["rope.freqs"]) != 4:  # not RoPE-ViT-Mixed's
        refuse(origin, "rotary position embeddings", "key 'rope.freqs'")
    unknown = [
        key
        for key in state
        if key not in _TOP_KEYS
        and not ((m := timm_format.BLOCK.match(key)) and _BLOCK_KEYS.match(m.group(2)))
    ]
    if unknown:
        shown = ", ".join(unknown[:8]) + (
            f", ... ({len(unknown) - 8} more)" if len(unknown) > 8 else ""
        )
        raise CheckpointError(
            f"{origin}: {len(unknown)} keys that timm's eva.py ViTs keras_vit reads do not have: {shown}."
        )
    if "patch_embed.proj.weight" not in state:
        raise CheckpointError(f"{origin}: key 'patch_embed.proj.weight' is missing.")
    needed = ("norm1.weight", "norm2.weight", "attn.proj.weight", "mlp.fc2.weight")
    for index in range(timm_format.num_blocks(state)):
        for part in needed:
            if f"blocks.{index}.{part}" not in state:
                raise CheckpointError(f"{origin}: key 'blocks.{index}.{part}' is missing.")
        if "blocks.0.gamma_1" in state and f"blocks.{index}.gamma_2" not in state:
            refuse(origin, "LayerScale on attention alone", f"no 'blocks.{index}.gamma_2'")


# The way back: a keras_vit model with the rotary families' options as timm's `Eva`.
# Every model is written with timm's AttentionRope (one qkv Linear with its bias) and,
# for a SwiGLU, GluMlp's packed fc1 (SwiGLU's split fc1_g / fc1_x with an inner
# norm): the model_args say so, whatever the architecture's own defaults. The
# architecture named fixes what model_args cannot (its LayerNorms' epsilon).
_WRITTEN_ARCHITECTURES = {1e-5: "vit_small_patch16_dinov3", 1e-6: "vit_small_patch16_rope_224"}
_ROPE_TYPES = {"axial": "cat", "mixed": "mixed", "dinov3": "dinov3"}


def eva_state(params, model):
    """Official arrays of `model` (`layout.model_params`) as an eva.py state dict."""
    state = {"patch_embed.proj.weight": torch_layout.conv_from_kernel(params["embedding/kernel"])}
    if "embedding/bias" in params:
        state["patch_embed.proj.bias"] = params["embedding/bias"]
    for name, key in (("cls", "cls_token"), ("Transformer/registers", "reg_token")):
        if name in params:
            state[key] = params[name]
    if "Transformer/posembed_input/pos_embedding" in params:
        state["pos_embed"] = params["Transformer/posembed_input/pos_embedding"]
    for name, module in (
        ("Transformer/encoder_prenorm", "norm_pre"),
        ("Transformer/encoder_norm", "norm"),
        ("fc_norm", "fc_norm"),
    ):
        if f"{name}/scale" in params:
            state[f"{module}.weight"] = params[f"{name}/scale"]
            state[f"{module}.bias"] = params[f"{name}/bias"]
    frequencies = []
    for index in range(torch_layout.num_blocks(params)):
        state.update(_block_state(params, index, model))
        name = f"{torch_layout.block_prefix(index)}MultiHeadDotProductAttention_1/rope/frequencies"
        if name in params:
            frequencies.append(np.asarray(params[name]))
    if frequencies:
        state["rope.freqs"] = np.stack(frequencies, axis=1)
    if "head/kernel" in params:
        state["head.weight"], state["head.bias"] = torch_layout.linear_from_dense(
            params["head/kernel"], params["head/bias"]
        )
    return state


def _block_state(params, index, model):
    parts, stem = torch_layout.block_parts(params, index), f"blocks.{index}."
    prefix = torch_layout.block_prefix(index)
    attention = prefix + "MultiHeadDotProductAttention_1/"
    state = {
        stem + "attn.qkv.weight": np.concatenate([parts[r][0] for r in torch_layout.PROJECTIONS]),
        stem + "attn.qkv.bias": np.concatenate([parts[r][1] for r in torch_layout.PROJECTIONS]),
    }
    modules = {"norm1": "norm_1", "norm2": "norm_2", "attn.proj": "out", "mlp.fc2": "dense_1"}
    for module, role in modules.items():
        state[f"{stem}{module}.weight"], state[f"{stem}{module}.bias"] = parts[role]
    weight, bias = parts["dense_0"]
    if model.gated_mlp and model.mlp_norm:  # timm's SwiGLU: split, the gate first
        (state[stem + "mlp.fc1_g.weight"], state[stem + "mlp.fc1_x.weight"]) = np.split(weight, 2)
        (state[stem + "mlp.fc1_g.bias"], state[stem + "mlp.fc1_x.bias"]) = np.split(bias, 2)
    else:
        state[stem + "mlp.fc1.weight"], state[stem + "mlp.fc1.bias"] = weight, bias
    for name, module in (
        (attention + "query_norm", "attn.q_norm"),
        (attention + "key_norm", "attn.k_norm"),
        (prefix + "MlpBlock_3/norm", "mlp.norm"),
    ):
        if f"{name}/scale" in params:
            state[f"{stem}{module}.weight"] = params[f"{name}/scale"]
            state[f"{stem}{module}.bias"] = params[f"{name}/bias"]
    for name, key in (("LayerScale_1", "gamma_1"), ("LayerScale_3", "gamma_2")):
        if f"{prefix}{name}/scale" in params:
            state[stem + key] = params[f"{prefix}{name}/scale"]
    return state


def eva_config(model):
    """timm's config.json for `model`: an architecture of eva.py and the model_args
    that rebuild `model` with it (`timm.create_model(architecture, **model_args)`).

    Raises:
        CheckpointError: what timm's Eva cannot express (named).
    """
    name, epsilon = model.name, float(model.layer_norm_epsilon)
    if epsilon not in _WRITTEN_ARCHITECTURES:
        raise CheckpointError(
            f"{name}: layer_norm_epsilon={epsilon}: timm's eva.py models use 1e-6 (EVA-02, "
            "RoPE-ViT) or 1e-5 (DINOv3)."
        )
    if model.representation_size or model.classifier == "map" or model.resnet is not None:
        raise CheckpointError(
            f"{name}: timm's Eva has no pre_logits, MAP head or ResNet to write them to."
        )
    if model.quick_gelu or model.approximate_gelu:
        raise CheckpointError(f"{name}: timm's Eva's GELU is the exact (erf) one.")
    if model.patch_embedding_bias == model.pre_norm:
        raise CheckpointError(
            f"{name}: timm's Eva has a patch-embedding bias exactly when it has no pre-norm."
        )
    if model.num_registers and model.absolute_position_embedding:
        if model.position_embedding_for_class_token:
            raise CheckpointError(
                f"{name}: registers with a class token that has a position embedding: "
                "timm's Eva adds its position embeddings to the patches alone then."
            )
    hidden, mlp_dim = int(model.hidden_size), int(model.mlp_dim)
    height, width = to_pair(model.image_size)
    patch = to_pair(model.patch_size)
    num_classes = int(model.num_classes) if model.include_top else 0
    token = model.classifier in ("token", "token_gap")
    rope = model.rope
    model_args = {
        "img_size": [height, width],
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "in_chans": int(model.channels),
        "embed_dim": hidden,
        "depth": int(model.num_layers),
        "num_heads": int(model.num_heads),
        "mlp_ratio": mlp_dim / hidden,
        "qkv_bias": True,
        "attn_type": "rope",
        "swiglu_mlp": bool(model.gated_mlp),
        "scale_mlp": bool(model.mlp_norm),
        "qk_norm": bool(model.qk_norm),
        "init_values": model.layer_scale_init,
        "class_token": token,
        "num_reg_tokens": int(model.num_registers),
        "no_embed_class": bool(model.num_registers)
        or (token and not model.position_embedding_for_class_token),
        "use_abs_pos_emb": bool(model.absolute_position_embedding),
        "use_rot_pos_emb": rope is not None,
        "use_pre_transformer_norm": bool(model.pre_norm),
        "use_fc_norm": bool(model.fc_norm),
        "use_post_transformer_norm": not model.fc_norm,
        "global_pool": "token" if model.classifier == "token" else "avg",
        "num_classes": num_classes,
        "dynamic_img_size": False,
    }
    if rope is not None:
        model_args.update(
            rope_type=_ROPE_TYPES[rope["kind"]],
            rope_temperature=rope["temperature"],
            rope_grid_indexing=rope["grid_indexing"],
            rope_rotate_half=rope["rotate_half"],
        )
        if rope["reference_grid"] is not None:
            model_args["ref_feat_shape"] = list(rope["reference_grid"])
    if int(hidden * model_args["mlp_ratio"]) != mlp_dim:
        raise CheckpointError(
            f"{name}: mlp_dim={mlp_dim} is not int(hidden_size * mlp_ratio) for any mlp_ratio."
        )
    architecture = _WRITTEN_ARCHITECTURES[epsilon]
    return timm_format.written_config(
        model, architecture, model_args, num_classes, hidden, (height, width)
    )
