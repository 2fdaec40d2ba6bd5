"""timm and Hugging Face transformers checkpoints as `weights=` values: which
family a path is, opened once (`keras_vit.checkpoint.source` wraps the result in
a `Source`).

    a state dict file      .safetensors / .bin / .pth / .pt: timm's keys, or
                           transformers' (then its config.json must be beside it);
                           a timm config.json beside it is read too
    a Hub directory        config.json + model.safetensors (or pytorch_model.bin):
                           transformers' where config.json has a `model_type`,
                           timm's where it names an `architecture`. A trainers/ run
                           directory also holds a config.json, with neither key.

The families' options (`keras_vit.families`) are in each opened file's metadata.
"""

import os

from keras_vit import run_directory
from keras_vit.checkpoint import (
    hub,
    metadata,
    state_dict,
    timm_eva,
    timm_format,
    transformers_format,
)
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.families import recorded_options

TIMM = "timm"
TRANSFORMERS = "transformers"


def claims(weights):
    """Whether a `weights` string is a timm or transformers checkpoint: a state dict
    file, a Hub directory or a Hub name ('hf-hub:<org>/<name>')."""
    return hub.claims(weights) or claims_file(weights) or claims_directory(weights)


def claims_file(weights):
    """Whether a `weights` string names a state dict file (by its suffix)."""
    return state_dict.is_state_dict_path(weights)


def claims_directory(weights):
    """Whether `weights` is a directory whose config.json is timm's or
    transformers' (not a trainers/ run's)."""
    return directory_family(weights) is not None


def directory_family(path):
    """TIMM, TRANSFORMERS or None for a path (None: not such a directory)."""
    config_path = os.path.join(os.fspath(path), state_dict.HUB_CONFIG)
    # run_directory's checks: a path with a scheme (gs://, a remote trainers/ run
    # given as --init) is asked of its filesystem, not of the local disk.
    if not run_directory.isdir(path) or not run_directory.exists(config_path):
        return None
    try:
        config = state_dict.read_config(config_path)
    except CheckpointError:
        return None
    if transformers_format.is_transformers_config(config):
        return TRANSFORMERS
    if timm_format.is_timm_config(config):
        return TIMM
    return None


def open_file(path, arch=None):
    """A state dict file, opened.

    Returns:
        (origin, family, metadata, read, config): the file read, TIMM or
        TRANSFORMERS, what the file (and a config.json beside it) records,
        read(model) -> {official name: array}, and the keras_vit model config
        of it (`model_config`) where its config.json records every size, else
        None.
    Raises:
        FileNotFoundError: no such file.
        ImportError: the package the file needs (safetensors, torch) is missing.
        RefusedFeatureError: a feature keras_vit does not compute (named).
        CheckpointError: neither family's ViT (its first keys named), a
            transformers file without its config.json, a mismatch (named).
    """
    path = os.fspath(path)
    state = state_dict.read_state_dict(path)
    config_path = os.path.join(os.path.dirname(path) or ".", state_dict.HUB_CONFIG)
    config = state_dict.read_config(config_path) if os.path.isfile(config_path) else None
    if transformers_format.is_transformers_state(state):
        if not transformers_format.is_transformers_config(config):
            raise CheckpointError(
                f"{path} is a transformers ViT state dict: its config.json (model_type "
                f"'vit') must be beside it ({config_path})."
            )
        return _opened(
            path, TRANSFORMERS, transformers_format.open_state(path, state, config, arch)
        )
    if timm_format.is_timm_state(state):
        timm_config = config if timm_format.is_timm_config(config) else None
        return _opened(
            path, TIMM, _timm_module(state, timm_config).open_state(path, state, timm_config, arch)
        )
    first = ", ".join(list(state)[:5])
    raise CheckpointError(
        f"{path} is neither a timm nor a transformers ViT state dict (its first keys: {first})."
    )


def open_directory(path, arch=None):
    """A timm or transformers Hub directory, opened: as `open_file` (origin: its
    weights file)."""
    path = os.fspath(path)
    family = directory_family(path)
    if family is None:
        raise CheckpointError(
            f"{path}: its {state_dict.HUB_CONFIG} is neither timm's ('architecture') nor "
            "transformers' ('model_type')."
        )
    config = state_dict.read_config(os.path.join(path, state_dict.HUB_CONFIG))
    weights = state_dict.weights_in(path, family)
    state = state_dict.read_state_dict(weights)
    module = transformers_format if family == TRANSFORMERS else _timm_module(state, config)
    return _opened(weights, family, module.open_state(weights, state, config, arch))


def class_names(weights):
    """The class names a `weights` value states: a transformers directory's (or a
    Hub name's, fetched by `keras_vit.checkpoint.hub`) config.json `id2label`
    (`transformers_format.class_names`); None for anything else, or placeholder
    names. What the exports label their classes with by default
    (tools/export_savedmodel.py)."""
    weights = os.fspath(weights)
    if hub.claims(weights):
        weights = hub.fetch(weights)
    elif claims_file(weights):
        weights = os.path.dirname(weights) or "."
    if directory_family(weights) != TRANSFORMERS:
        return None
    config = state_dict.read_config(os.path.join(weights, state_dict.HUB_CONFIG))
    return transformers_format.class_names(config)


def model_config(meta, sizes):
    """The keras_vit model config (`VisionTransformer` arguments, as its
    `get_config`) of a file whose metadata is `meta` and whose sizes
    (patch_size, hidden_size, mlp_dim, num_heads, num_layers) are `sizes`: what
    a trainers/ --init builds, as for a run directory."""
    return {
        **sizes,
        "image_size": list(meta["image_size"]),
        "channels": meta["channels"],
        "classifier": meta["classifier"],
        "representation_size": meta["representation_size"],
        "num_classes": meta.get("num_classes"),
        "include_top": meta.get("include_top", True),
        **recorded_options(meta),
        **({"preprocessing": meta["preprocessing"]} if meta.get("preprocessing") else {}),
    }


def _timm_module(state, config):
    """The module that reads a timm state dict: eva.py's families' (`timm_eva`: EVA-02,
    RoPE-ViT, DINOv3) where it claims it, else the plain ViT's (`timm_format`)."""
    return timm_eva if timm_eva.claims(state, config) else timm_format


def _opened(origin, family, opened):
    meta, read, sizes = opened
    metadata.stating_the_top(meta)  # a state dict without a head, a headless config
    config = model_config(meta, sizes) if sizes and "image_size" in meta else None
    return origin, family, meta, read, config
