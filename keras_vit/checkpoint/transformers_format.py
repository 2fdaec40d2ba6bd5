"""Hugging Face transformers' ViT checkpoints (`ViTModel`,
`ViTForImageClassification`): read into keras_vit's official names, and written
back.

A transformers checkpoint is a directory: `config.json` (`model_type: vit`)
and `model.safetensors` or `pytorch_model.bin`. Its keys (a
ViTForImageClassification's under 'vit.', beside its 'classifier'):

    embeddings.patch_embeddings.projection  embedding/kernel (P, P, C, D), /bias
    embeddings.cls_token (1, 1, D)          cls (every transformers ViT has one)
    embeddings.position_embeddings          Transformer/posembed_input/pos_embedding
    encoder.layer.{i}.layernorm_before      .../LayerNorm_0
    encoder.layer.{i}.attention.attention.query, .key, .value
                                            .../query, key, value (D, heads, head_dim)
    encoder.layer.{i}.attention.output.dense
                                            .../out (heads, head_dim, D)
    encoder.layer.{i}.layernorm_after       .../LayerNorm_2
    encoder.layer.{i}.intermediate.dense, .output.dense
                                            .../MlpBlock_3/Dense_0, Dense_1
    layernorm                               Transformer/encoder_norm
    pooler.dense (ViTModel)                 pre_logits: its dense + tanh on the
                                            class token is keras_vit's pre_logits
    classifier (ViTForImageClassification)  head

config.json says what the arrays do not: `hidden_act` ('gelu': the exact erf
form; 'gelu_new', 'gelu_pytorch_tanh', ...: the tanh form), `layer_norm_eps`
(1e-12 by default), the resolution, the heads.
"""

import os
import re

from keras_vit.checkpoint import (
    layout,
    state_dict,
    torch_layout,
    transformers_dinov3,
    transformers_families,
)
from keras_vit.checkpoint import sizes as sizes_lib
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.refused import check_writable, refuse
from keras_vit.families import FAMILY_DEFAULTS
from keras_vit.layers.patch_embedding import to_pair
from keras_vit.layers.position_embedding import TRANSFORMERS
from keras_vit.preprocessing import PIXEL_MAX, mean_std

MODEL_TYPE = "vit"
# transformers' ViTConfig defaults, where a config.json leaves a key out.
DEFAULTS = {
    "hidden_act": "gelu",
    "layer_norm_eps": 1e-12,
    "pooler_act": "tanh",
    "num_channels": 3,
    "image_size": 224,
    "patch_size": 16,
    "qkv_bias": True,
}
# transformers' activation names (`transformers.activations.ACT2FN`) -> approximate_gelu.
ACTIVATIONS = {
    "gelu": False,
    "gelu_python": False,
    "gelu_new": True,
    "gelu_fast": True,
    "gelu_pytorch_tanh": True,
    "gelu_python_tanh": True,
    "quick_gelu": False,  # quick_gelu=True (CLIP's)
}
# What save_transformers writes for approximate_gelu (torch's tanh GELU).
WRITTEN_ACTIVATIONS = {False: "gelu", True: "gelu_pytorch_tanh"}
CLASSIFIER_PREFIX = "vit."
# transformers' ViTImageProcessor defaults, where a preprocessor_config.json leaves a key out.
PROCESSOR_DEFAULTS = {
    "do_rescale": True,
    "rescale_factor": 1 / PIXEL_MAX,
    "do_normalize": True,
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
}
PIL_BILINEAR = 2  # the resample save_transformers writes: the serving signatures' resize

_LAYER = re.compile(r"^encoder\.layer\.(\d+)\.(.+)\.(weight|bias)$")
_LAYER_MODULES = {
    "layernorm_before": "norm_1",
    "attention.attention.query": "query",
    "attention.attention.key": "key",
    "attention.attention.value": "value",
    "attention.output.dense": "out",
    "layernorm_after": "norm_2",
    "intermediate.dense": "dense_0",
    "output.dense": "dense_1",
}
_EMBEDDINGS = ("embeddings.cls_token", "embeddings.position_embeddings")
_TOP_MODULES = {
    "embeddings.patch_embeddings.projection": None,
    "layernorm": "Transformer/encoder_norm",
    "pooler.dense": "pre_logits",
    "classifier": "head",
}
# Keys transformers' forward never reads for an image without a patch mask: skipped.
_UNUSED = ("embeddings.mask_token",)


def is_transformers_state(keys):
    """Whether state dict keys are a transformers ViT's."""
    return any(
        key.startswith(
            (
                "embeddings.patch_embeddings.",
                "vit.embeddings.patch_embeddings.",
                "dinov2.embeddings.patch_embeddings.",
                "vision_model.embeddings.patch_embedding.",  # SigLIP's, CLIP's towers
            )
        )
        for key in keys
    )


def is_transformers_config(config):
    """Whether a config.json (a dict) is transformers' (it has a `model_type`)."""
    return isinstance(config, dict) and "model_type" in config


def open_state(origin, state, config, arch=None):
    """What a transformers ViT checkpoint records, and how to read it for a model.

    Args:
        origin: the directory (or file), for messages.
        state: key -> array (`keras_vit.checkpoint.state_dict.read_state_dict`).
        config: its config.json (a dict).
        arch: the architecture it goes to (`keras_vit.checkpoint.source.architecture`),
            or None; its sizes are checked against config.json's.
    Returns:
        (metadata, read, sizes): the metadata dict (`keras_vit.checkpoint.metadata`:
        classifier, channels, representation_size, num_classes, image_size,
        grid_size, approximate_gelu, layer_norm_epsilon, fc_norm),
        read(model) -> {official name: array}, and the sizes config.json
        records (patch_size, hidden_size, mlp_dim, num_heads, num_layers).
    Raises:
        RefusedFeatureError: a feature keras_vit does not compute (named).
        CheckpointError: another model_type, keys of another model (named),
            sizes that disagree with `arch` (named).
    """
    for family in (transformers_families, transformers_dinov3):  # DINOv2, SigLIP, CLIP; DINOv3
        if family.claims(config):
            preprocessing = read_preprocessing(os.path.dirname(origin) or ".")
            return family.open_state(origin, state, config, preprocessing)
    config = {**DEFAULTS, **config}
    model_type = config.get("model_type")
    if model_type != MODEL_TYPE:
        raise CheckpointError(
            f"{origin}: config.json model_type {model_type!r} is not {MODEL_TYPE!r}: keras_vit "
            "reads transformers' ViT (ViTModel, ViTForImageClassification)."
        )
    if any("MaskedImageModeling" in name for name in config.get("architectures") or ()):
        refuse(origin, "masked image modeling decoder", f"architectures {config['architectures']}")
    act = config["hidden_act"]
    if act not in ACTIVATIONS:
        refuse(origin, "activation", f"hidden_act={act!r}")
    if config["pooler_act"] != "tanh":
        refuse(origin, "pooler activation", f"pooler_act={config['pooler_act']!r}")
    state = _unprefixed(state)
    _check_keys(origin, state)
    num_heads = int(config["num_attention_heads"])
    _check_sizes(origin, config, arch)
    image_size = to_pair(config["image_size"], "image_size")
    patch = to_pair(config["patch_size"], "patch_size")
    grid = (image_size[0] // patch[0], image_size[1] // patch[1])
    tokens = state["embeddings.position_embeddings"].shape[1]
    if tokens != 1 + grid[0] * grid[1]:
        raise CheckpointError(
            f"{origin}: 'embeddings.position_embeddings' has {tokens} rows, config.json's "
            f"image_size {config['image_size']} and patch_size {config['patch_size']} give "
            f"1 + {grid[0]}x{grid[1]}."
        )
    meta = {
        "classifier": "token",
        "channels": int(state["embeddings.patch_embeddings.projection.weight"].shape[1]),
        "representation_size": (
            int(state["pooler.dense.weight"].shape[0]) if "pooler.dense.weight" in state else None
        ),
        "image_size": image_size,
        "grid_size": grid,
        "approximate_gelu": ACTIVATIONS[act],
        "layer_norm_epsilon": float(config["layer_norm_eps"]),
        "fc_norm": False,
        "quick_gelu": act == "quick_gelu",
        "preprocessing": read_preprocessing(os.path.dirname(origin) or "."),
        "posemb_resize": TRANSFORMERS,  # transformers' interpolate_pos_encoding
    }
    if "classifier.weight" in state:
        meta["num_classes"] = int(state["classifier.weight"].shape[0])

    sizes = sizes_lib.transformers_sizes(config, patch, num_heads)

    def read(model):
        sizes_lib.check_fits(origin, sizes, model)
        return to_params(state, num_heads)

    return meta, read, sizes


def to_params(state, num_heads):
    """A transformers ViT state dict (unprefixed, checked) as official arrays."""
    projection = "embeddings.patch_embeddings.projection"
    params = {
        "embedding/kernel": torch_layout.kernel_from_conv(state[f"{projection}.weight"]),
        "embedding/bias": state[f"{projection}.bias"],
        "cls": state["embeddings.cls_token"],
        "Transformer/posembed_input/pos_embedding": state["embeddings.position_embeddings"],
    }
    for index in range(_num_layers(state)):
        prefix = f"encoder.layer.{index}."
        parts = {
            role: (state[f"{prefix}{module}.weight"], state.get(f"{prefix}{module}.bias"))
            for module, role in _LAYER_MODULES.items()
        }
        params.update(torch_layout.block_params(index, parts, num_heads))
    params["Transformer/encoder_norm/scale"] = state["layernorm.weight"]
    params["Transformer/encoder_norm/bias"] = state["layernorm.bias"]
    modules = (("pooler.dense", "pre_logits"), ("classifier", "head"))
    params.update(torch_layout.dense_params(state, modules))
    return params


def save_transformers(model, directory):
    """Writes `model` as a transformers ViT directory (config.json +
    model.safetensors) that `from_pretrained` loads: a model with its head as
    `ViTForImageClassification`, a headless one as `ViTModel` (with its pooler
    where the model has pre_logits; without, load it with
    `ViTModel.from_pretrained(directory, add_pooling_layer=False)`). A family's
    model as its own class (`transformers_families.family_of`): DINOv2 (with
    registers) as `Dinov2Model` / `Dinov2WithRegistersModel`, SigLIP's tower as
    `SiglipVisionModel`, CLIP's as `CLIPVisionModel` (with its head:
    `CLIPVisionModelWithProjection`, whose projection has no bias).

    Raises:
        CheckpointError: a model transformers cannot express (named): a
            hybrid, 'gap' (transformers' ViT pools the class token), fc_norm,
            pre_logits under a head (ViTForImageClassification has no pooler),
            DeiT III's patches-only position embeddings, a head on DINOv2 or SigLIP.
    Returns:
        the path of the safetensors file written.
    """
    model_type = transformers_families.family_of(model)
    if model_type is not None:  # DINOv2, SigLIP's and CLIP's towers: their own classes
        config = transformers_families.write_config(model, model_type, WRITTEN_ACTIVATIONS)
        state = transformers_families.write_state(layout.model_params(model), model_type)
        return _write(directory, state, config, model)
    config = transformers_config(model)
    state = from_params(layout.model_params(model))
    if model.include_top:
        state = {
            (key if key.startswith("classifier.") else CLASSIFIER_PREFIX + key): value
            for key, value in state.items()
        }
    return _write(directory, state, config, model)


def _write(directory, state, config, model):
    """config.json, model.safetensors and preprocessor_config.json into `directory`."""
    directory = os.fspath(directory)
    os.makedirs(directory, exist_ok=True)
    weights = os.path.join(directory, state_dict.HUB_WEIGHTS[0])
    state_dict.write_safetensors(weights, state)
    state_dict.write_config(directory, config)
    state_dict.write_config(directory, preprocessor_config(model), state_dict.HUB_PREPROCESSOR)
    return weights


def class_names(config):
    """The class names of a transformers config.json's `id2label`, in label order;
    None where it has none, misses a label, or holds only transformers' placeholder
    names 'LABEL_<i>'."""
    id2label = config.get("id2label") or {}
    try:
        names = [str(id2label[str(i)]) for i in range(len(id2label))]
    except KeyError:
        return None
    if not names or names == [f"LABEL_{i}" for i in range(len(names))]:
        return None
    return names


def read_preprocessing(directory):
    """The input normalisation (`keras_vit.preprocessing`) of a transformers
    directory's preprocessor_config.json: its image_mean / image_std after a
    rescale by 1/255 (ViTImageProcessor's; without normalisation, mean 0 and
    std 1); None where there is no such file, or it states the authors'.

    Raises:
        CheckpointError: an unreadable file, a rescale other than 1/255, or a
            malformed mean / std (the file and key named).
    """
    path = os.path.join(directory, state_dict.HUB_PREPROCESSOR)
    if not os.path.isfile(path):
        return None
    processor = {**PROCESSOR_DEFAULTS, **state_dict.read_config(path)}
    rescale = processor["rescale_factor"] if processor["do_rescale"] else 1.0
    if not isinstance(rescale, (int, float)) or abs(rescale * PIXEL_MAX - 1) > 1e-6:
        raise CheckpointError(
            f"{path}: rescale_factor {rescale!r} (do_rescale {processor['do_rescale']}) is not "
            "1/255: keras_vit normalises [0, 255] pixels by a mean and std on the [0, 1] scale."
        )
    if not processor["do_normalize"]:
        return {"mean": [0.0], "std": [1.0]}
    return state_dict.checked_preprocessing(
        processor["image_mean"], processor["image_std"], f"{path}: image_mean / image_std"
    )


def preprocessor_config(model):
    """transformers' preprocessor_config.json (a ViTImageProcessor's) for `model`:
    its resolution and its normalisation (`model.preprocessing`)."""
    height, width = to_pair(model.image_size)
    mean, std = mean_std(getattr(model, "preprocessing", None), int(model.channels))
    return {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True,
        "size": {"height": height, "width": width},
        "resample": PIL_BILINEAR,
        "do_rescale": True,
        "rescale_factor": 1 / PIXEL_MAX,
        "do_normalize": True,
        "image_mean": mean,
        "image_std": std,
    }


def from_params(params):
    """Official arrays (a plain 'token' ViT's) as a transformers state dict
    without the 'vit.' prefix: the inverse of `to_params`."""
    projection = "embeddings.patch_embeddings.projection"
    state = {
        f"{projection}.weight": torch_layout.conv_from_kernel(params["embedding/kernel"]),
        f"{projection}.bias": params["embedding/bias"],
        "embeddings.cls_token": params["cls"],
        "embeddings.position_embeddings": params["Transformer/posembed_input/pos_embedding"],
        **torch_layout.blocks_state(params, "encoder.layer", _LAYER_MODULES),
    }
    state["layernorm.weight"] = params["Transformer/encoder_norm/scale"]
    state["layernorm.bias"] = params["Transformer/encoder_norm/bias"]
    for name, module in (("pre_logits", "pooler.dense"), ("head", "classifier")):
        if f"{name}/kernel" in params:
            weight, bias = torch_layout.linear_from_dense(
                params[f"{name}/kernel"], params[f"{name}/bias"]
            )
            state[f"{module}.weight"], state[f"{module}.bias"] = weight, bias
    return state


def transformers_config(model):
    """transformers' config.json for `model` (a `ViTConfig`'s keys).

    Raises:
        CheckpointError: a model transformers' ViT cannot express (named).
    """
    name = model.name
    check_writable(model, "transformers'")
    if getattr(model, "resnet", None) is not None:
        raise CheckpointError(
            f"{name}: a hybrid cannot be written as a transformers ViT (it has no ResNet)."
        )
    for option in ("layer_scale_init", "num_registers", "pre_norm"):
        if getattr(model, option, FAMILY_DEFAULTS[option]) != FAMILY_DEFAULTS[option]:
            raise CheckpointError(
                f"{name}: {option}={getattr(model, option)!r}: transformers' ViT has no such "
                "layer (write it for timm: keras_vit.checkpoint.save_timm)."
            )
    if not getattr(model, "position_embedding_for_class_token", True) or not getattr(
        model, "patch_embedding_bias", True
    ):
        raise CheckpointError(
            f"{name}: transformers' ViT gives its class token a position embedding and its "
            "patch embedding a bias (write it for timm: keras_vit.checkpoint.save_timm)."
        )
    if model.classifier != "token":
        raise CheckpointError(
            f"{name}: classifier={model.classifier!r}: transformers' ViT pools the class "
            "token ('token')."
        )
    if getattr(model, "fc_norm", False):
        raise CheckpointError(f"{name}: fc_norm=True: transformers' ViT has no fc_norm.")
    if model.include_top and model.representation_size:
        raise CheckpointError(
            f"{name}: representation_size={model.representation_size} with a head: "
            "ViTForImageClassification has no pooler (pre_logits) before its classifier; "
            "a headless model (include_top=False) is written as ViTModel with its pooler."
        )
    height, width = to_pair(model.image_size)
    patch = to_pair(model.patch_size)
    hidden = int(model.hidden_size)
    config = {
        "architectures": ["ViTForImageClassification" if model.include_top else "ViTModel"],
        "model_type": MODEL_TYPE,
        "hidden_size": hidden,
        "num_hidden_layers": int(model.num_layers),
        "num_attention_heads": int(model.num_heads),
        "intermediate_size": int(model.mlp_dim),
        "hidden_act": (
            "quick_gelu"
            if getattr(model, "quick_gelu", False)
            else WRITTEN_ACTIVATIONS[bool(getattr(model, "approximate_gelu", True))]
        ),
        "hidden_dropout_prob": 0.0,
        "attention_probs_dropout_prob": 0.0,
        "layer_norm_eps": float(getattr(model, "layer_norm_epsilon", 1e-6)),
        "image_size": height if height == width else [height, width],
        "patch_size": patch[0] if patch[0] == patch[1] else list(patch),
        "num_channels": int(model.channels),
        "qkv_bias": True,
        "encoder_stride": patch[0],
        "pooler_output_size": int(model.representation_size or hidden),
        "pooler_act": "tanh",
        "dtype": "float32",
    }
    if model.include_top:
        labels = [f"LABEL_{i}" for i in range(int(model.num_classes))]
        config["id2label"] = {str(i): label for i, label in enumerate(labels)}
        config["label2id"] = {label: i for i, label in enumerate(labels)}
    return config


def _unprefixed(state):
    """A ViTForImageClassification's keys without 'vit.' (its classifier keeps its
    name); a ViTModel's as they are."""
    if not any(key.startswith(CLASSIFIER_PREFIX) for key in state):
        return dict(state)
    return {
        key[len(CLASSIFIER_PREFIX) :] if key.startswith(CLASSIFIER_PREFIX) else key: value
        for key, value in state.items()
    }


def _check_keys(origin, state):
    if "decoder.0.weight" in state or any(key.startswith("decoder.") for key in state):
        refuse(origin, "masked image modeling decoder", "keys 'decoder.*'")
    if not is_transformers_state(state):
        first = ", ".join(list(state)[:5])
        raise CheckpointError(
            f"{origin} is not a transformers ViT state dict: no "
            f"'embeddings.patch_embeddings.projection.weight' (its first keys: {first})."
        )
    known = {f"{module}.{part}" for module in _TOP_MODULES for part in ("weight", "bias")}
    known.update(_EMBEDDINGS + _UNUSED)
    unknown = [
        key
        for key in state
        if key not in known and not ((m := _LAYER.match(key)) and m.group(2) in _LAYER_MODULES)
    ]
    if unknown:
        shown = ", ".join(unknown[:8]) + (
            f", ... ({len(unknown) - 8} more)" if len(unknown) > 8 else ""
        )
        raise CheckpointError(
            f"{origin}: {len(unknown)} keys that transformers' ViT does not have: {shown}."
        )
    for index in range(_num_layers(state)):
        for module in _LAYER_MODULES:
            if f"encoder.layer.{index}.{module}.weight" not in state:
                raise CheckpointError(
                    f"{origin}: key 'encoder.layer.{index}.{module}.weight' is missing."
                )
    for key in (*_EMBEDDINGS, "layernorm.weight", "layernorm.bias"):
        if key not in state:
            raise CheckpointError(f"{origin}: key '{key}' is missing.")


def _check_sizes(origin, config, arch):
    if not arch:
        return
    for key, name in (
        ("hidden_size", "hidden_size"),
        ("num_attention_heads", "num_heads"),
        ("num_hidden_layers", "num_layers"),
        ("intermediate_size", "mlp_dim"),
    ):
        expected = sizes_lib.given_size(arch, name)
        if key in config and expected is not None and int(config[key]) != int(expected):
            raise CheckpointError(
                f"{origin}: config.json has {key} {config[key]}, the model's {name} is {expected}."
            )


def _num_layers(state):
    indices = {int(m.group(1)) for key in state if (m := _LAYER.match(key))}
    return max(indices) + 1 if indices else 0
