"""Loading weights into a keras_vit model: official `.npz` files (any resolution,
any head), registry names, and Keras' own `.keras` / `.weights.h5` files.

Never a partial load: everything is checked before any variable is assigned.

This module does not import the model class (`keras_vit.vision_transformer`
imports it, through `keras_vit.factory`): a source model rebuilt from a config
is built by the `model_class` its caller passes.
"""

import dataclasses
import json
import logging
import os

import keras
import numpy as np

from keras_vit import run_directory
from keras_vit.checkpoint import layout, npz, registry
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.layers.position_embedding import resize_position_embedding
from keras_vit.layers.resnet import resnet_stride
from keras_vit.variants import variant_name

logger = logging.getLogger("keras_vit")

POSEMB = "Transformer/posembed_input/pos_embedding"
_TOP = ("head/kernel", "head/bias", "pre_logits/kernel", "pre_logits/bias")


@dataclasses.dataclass
class WeightsSource:
    """Weights to load: `params` under official names (None for `.weights.h5`,
    which Keras loads itself), where they came from, and what they imply for the
    model (image_size, num_classes, representation_size, classifier; grid_size
    when known)."""

    origin: str
    params: dict = None
    metadata: dict = dataclasses.field(default_factory=dict)
    h5_path: str = None


def open_source(weights, arch, model_class=None):
    """Resolves `weights` for a model of architecture `arch` (patch_size,
    hidden_size, ...; for hybrids `resnet`, the normalised spec, and `stride`, the
    ResNet's downsampling; optionally `variant`, its name).

    `weights` is a registry short name, 'augreg:<AugReg file name>', an https://
    or gs:// URL of an official `.npz` (downloaded once into the cache,
    `keras_vit.checkpoint.registry`), or a path. `model_class` (its
    `from_config`) rebuilds the source model of a `.weights.h5` file that has its
    config beside it; it is needed only there.

    Raises:
        FileNotFoundError: a path that does not exist.
        ValueError: an unknown short name, a malformed AugReg name or URL, an
            AugReg checkpoint of another architecture (before any download).
        registry.DownloadError: a download that cannot be made (offline, ...).
        CheckpointError: a file that is not a checkpoint of this architecture.
    """
    weights = os.fspath(weights)
    variant = arch.get("variant") or variant_name(arch)
    remote = registry.is_remote(weights) or weights.startswith(("http://", "https://"))
    if remote or not os.path.exists(weights):
        if not remote and (os.sep in weights or weights.endswith((".npz", ".keras", ".h5"))):
            raise FileNotFoundError(f"Weights file not found: {weights}")
        entry = registry.resolve(weights, variant)
        if entry is None:
            known = registry.names_for(variant) if variant else []
            raise ValueError(
                f"weights={weights!r} is neither an existing file nor a registered "
                f"checkpoint name for {variant or 'this architecture'}"
                + (f" (registered: {', '.join(known)})" if known else "")
                + "; any published file is also 'augreg:<AugReg file name>' or an "
                "https:// / gs:// URL of its .npz."
            )
        path = registry.fetch(entry)
        params = npz.read_npz(path)
        return WeightsSource(path, params, _npz_metadata(params, arch, entry, weights))
    if os.path.isdir(weights) or weights.endswith(".weights.h5"):
        return _h5_source(weights, model_class)
    if weights.endswith(".keras"):
        return _keras_source(weights)
    params = npz.read_npz(weights)
    return WeightsSource(weights, params, _npz_metadata(params, arch))


def _npz_metadata(params, arch, entry=None, name=None):
    """What an official checkpoint implies for the model built from it, read from
    its arrays: classifier ('cls' present), input channels, pre_logits width
    (None without one), classes (head/kernel) and resolution (the position
    embedding's square grid x patch x the ResNet's stride). A registry `entry`
    (`name`: what the user asked for) gives the resolution and classes where the
    arrays do not; where it disagrees with them, the arrays win (one log line)."""
    meta = {"classifier": "token" if "cls" in params else "gap"}
    stem = params.get(_input_kernel(arch.get("resnet")))
    if stem is not None and stem.ndim == 4:
        meta["channels"] = int(stem.shape[2])
    meta["representation_size"] = (
        int(params["pre_logits/kernel"].shape[-1]) if "pre_logits/kernel" in params else None
    )
    if "head/kernel" in params:
        meta["num_classes"] = int(params["head/kernel"].shape[-1])
    posemb = params.get(POSEMB)
    patch = arch.get("patch_size")
    if posemb is not None and posemb.ndim == 3 and isinstance(patch, int):
        grid_tokens = posemb.shape[1] - (1 if "cls" in params else 0)
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
    return meta


def _keras_source(path):
    try:
        model = keras.saving.load_model(path, compile=False, safe_mode=True)
    except Exception as e:  # Keras raises many types for unreadable archives
        raise CheckpointError(f"{path} could not be read as a .keras model: {e}") from e
    return _model_source(model, path)


def _h5_source(path, model_class):
    """A `.weights.h5` file, or a training run directory (`keras_vit.run_directory`).

    With the model's config beside it (a run directory's `model_config.json`, or
    `<stem>.config.json`, as tools/convert_checkpoint.py writes), the source model
    is rebuilt so that the weights can go to another head or resolution; without
    one, Keras loads the file into a model of the same architecture.
    """
    if run_directory.isdir(path):
        run = run_directory.RunDirectory(path)
        if not run.has_model() and not run_directory.exists(run.weights):
            raise FileNotFoundError(
                f"{path} is a directory but not a training run: no {run.weights}"
            )
        weights, config = run.weights, run.model_config
    else:
        weights = path
        config = weights[: -len(".weights.h5")] + ".config.json"
        if not run_directory.exists(config):
            config = os.path.join(os.path.dirname(weights), run_directory.MODEL_CONFIG)
    if not run_directory.exists(weights):
        raise FileNotFoundError(f"Weights file not found: {weights}")
    if not run_directory.exists(config):
        return WeightsSource(weights, h5_path=weights)
    if model_class is None:
        raise ValueError(
            f"{weights} comes with its model's config ({config}): "
            "open_source needs the model_class to rebuild that model."
        )
    try:
        with run_directory.open_file(config) as f:
            model = model_class.from_config(json.load(f))
        model.load_weights(weights)
    except Exception as e:  # Keras raises ValueError/KeyError/OSError here
        raise CheckpointError(f"{weights} (with {config}): {e}") from e
    return _model_source(model, weights)


def _model_source(model, origin):
    """The weights of a loaded keras_vit model, and what they imply."""
    try:
        params = layout.model_params(model)
    except (ValueError, AttributeError) as e:
        raise CheckpointError(f"{origin} does not hold a keras_vit model: {e}") from e
    config = model.get_config()
    meta = {
        key: config.get(key)
        for key in ("image_size", "num_classes", "representation_size", "classifier")
    }
    meta["channels"] = int(config.get("channels") or 3)
    meta["grid_size"] = tuple(model.grid_size)
    if not config.get("include_top", True):
        meta.pop("num_classes")
    return WeightsSource(origin, params, meta)


def load_weights(model, weights):
    """Loads `weights` (registry name, `.npz`, `.keras` or `.weights.h5` path, or a
    trainers/ run directory) into
    `model`, resizing position embeddings and replacing a head of another width
    by a fresh zero-initialised one. Returns the model."""
    arch = architecture(
        model.patch_size,
        model.hidden_size,
        model.mlp_dim,
        model.num_heads,
        model.num_layers,
        getattr(model, "resnet", None),
    )
    load_source(model, open_source(weights, arch, type(model)))
    return model


def architecture(patch_size, hidden_size, mlp_dim, num_heads, num_layers, resnet=None):
    """What `open_source` needs to know of a model: its sizes (a square patch as
    an int, as the variants list it) and, for hybrids, the normalised `resnet`
    spec with its downsampling `stride`."""
    if not isinstance(patch_size, int) and patch_size[0] == patch_size[1]:
        patch_size = int(patch_size[0])
    arch = dict(
        patch_size=patch_size,
        hidden_size=hidden_size,
        mlp_dim=mlp_dim,
        num_heads=num_heads,
        num_layers=num_layers,
    )
    if resnet is not None:
        arch.update(resnet=resnet, stride=resnet_stride(resnet))
    return arch


def load_source(model, source):
    """Loads an opened WeightsSource into `model` (all-or-nothing)."""
    if source.h5_path is not None:
        try:
            model.load_weights(source.h5_path)
        except Exception as e:  # Keras raises ValueError/KeyError/OSError here
            raise CheckpointError(f"{source.h5_path}: {e}") from e
        return
    assign_params(model, source.params, source.origin, source.metadata.get("grid_size"))


def assign_params(model, params, origin="checkpoint", grid_size=None):
    """Checks `params` (official names -> arrays) against `model`, then assigns.

    Position embeddings of another resolution are resized as the official
    `interpolate_posembed` does (the source grid is `grid_size`, or square).
    An RGB input kernel (the patch embedding's, a hybrid's 'conv_root') going to a
    model of C != 3 input channels is adapted as timm's `adapt_input_conv`:
    summed over RGB for C = 1, else repeated over the channels and scaled by 3/C
    (one log line). For a plain ViT and C = 1 that is exact: the model gives a
    grey image the logits the RGB model gives it repeated to RGB; a hybrid's
    weight-standardised stem only approximates that (an initialisation).
    A head (or pre_logits) of another shape, or absent from the checkpoint, is
    left freshly initialised, with a log line. Raises CheckpointError naming the
    first mismatched key with both shapes and listing missing/unexpected keys.
    """
    targets = layout.model_variables(model)
    stem = _input_kernel(getattr(model, "resnet", None))
    params = dict(params)
    has = {name.split("/")[0] for name in targets if name in _TOP}
    missing = [n for n in targets if n not in params and n not in _TOP]
    unexpected = [
        n for n in params if n not in targets and not (n in _TOP and n.split("/")[0] not in has)
    ]
    ignored_top = sorted(
        {n.split("/")[0] for n in params if n in _TOP and n.split("/")[0] not in has}
    )
    values, fresh, mismatch = {}, set(), None
    for name, variable in targets.items():
        if name not in params:
            if name in _TOP:
                fresh.add(name.split("/")[0])
            continue
        value = np.asarray(params[name])
        expected = tuple(variable.shape)
        if (
            name == POSEMB
            and value.shape != expected
            and value.ndim == 3
            and value.shape[-1] == expected[-1]
            and not missing
            and not unexpected
        ):
            value = _resize(value, grid_size, model, origin)
        if (
            name == stem
            and value.shape != expected
            and value.ndim == 4
            and value.shape[2] == 3
            and value.shape[:2] + value.shape[3:] == expected[:2] + expected[3:]
        ):
            value = adapt_input_channels(value, expected[2])
            logger.info(
                "%s: the RGB '%s' of %s is adapted to %d input channels (%s).",
                model.name,
                name,
                origin,
                expected[2],
                "summed over RGB"
                if expected[2] == 1
                else f"repeated and scaled by 3/{expected[2]}",
            )
        if value.shape != expected:
            if name in _TOP:
                fresh.add(name.split("/")[0])
                continue
            mismatch = mismatch or (name, value.shape, expected)
            continue
        values[name] = value
    if mismatch or missing or unexpected:
        problems = []
        if mismatch:
            problems.append(
                f"first mismatched key '{mismatch[0]}': checkpoint shape "
                f"{tuple(mismatch[1])} vs model shape {mismatch[2]}"
            )
        if missing:
            problems.append(f"{len(missing)} missing keys: {_listing(missing)}")
        if unexpected:
            problems.append(f"{len(unexpected)} unexpected keys: {_listing(unexpected)}")
        raise CheckpointError(
            f"{origin} does not fit model '{model.name}': " + "; ".join(problems) + "."
        )
    for top in sorted(fresh):
        for suffix in ("kernel", "bias"):
            values.pop(f"{top}/{suffix}", None)
        logger.info(
            "%s: '%s' is not taken from %s (absent or of another shape); "
            "it is freshly initialised.",
            model.name,
            top,
            origin,
        )
    for top in ignored_top:
        logger.info("%s: the checkpoint's '%s' is not used by this model.", model.name, top)
    for name, value in values.items():
        targets[name].assign(value.astype(keras.backend.standardize_dtype(targets[name].dtype)))
    return model


def adapt_input_channels(kernel, channels):
    """An RGB convolution kernel (kh, kw, 3, out) for `channels` input channels,
    as timm's `adapt_input_conv`: the sum over RGB for 1 channel (a grey image
    then gives what the RGB kernel gives it repeated to RGB); otherwise RGB
    repeated to `channels` (R, G, B, R, ...) and scaled by 3 / channels, which
    keeps the response's scale (exactly, for an input whose channels all hold one
    image, where `channels` is a multiple of 3).

    Returns:
        (kh, kw, channels, out), the kernel's dtype.
    Raises:
        ValueError: a kernel that is not (kh, kw, 3, out), or channels < 1.
    """
    kernel = np.asarray(kernel)
    if kernel.ndim != 4 or kernel.shape[2] != 3:
        raise ValueError(
            f"adapt_input_channels needs an RGB kernel (kh, kw, 3, out), got shape {kernel.shape}."
        )
    if isinstance(channels, bool) or int(channels) != channels or channels < 1:
        raise ValueError(f"channels must be a positive integer, got {channels!r}.")
    channels = int(channels)
    if channels == 1:
        return kernel.sum(axis=2, keepdims=True)
    repeats = -(-channels // 3)
    tiled = np.concatenate([kernel] * repeats, axis=2)[:, :, :channels]
    return (tiled * (3.0 / channels)).astype(kernel.dtype)


def _input_kernel(resnet):
    """The checkpoint name of the kernel that sees the image's channels."""
    return "conv_root/kernel" if resnet is not None else "embedding/kernel"


def _resize(value, grid_size, model, origin):
    prefix = 1 if model.classifier == "token" else 0
    try:
        return resize_position_embedding(value, grid_size, model.grid_size, prefix)
    except ValueError as e:
        raise CheckpointError(f"{origin}: '{POSEMB}' cannot be resized: {e}") from e


def _listing(names, limit=12):
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
