"""Loading an opened checkpoint (`keras_vit.checkpoint.source.Source`) into a
keras_vit model that is already built: its arrays, adapted by pure functions
(position embeddings resized, RGB kernels adapted to other channel counts, a head
of another width left fresh: `fit_params`), then one strict assignment.

Never a partial load: everything is checked before any variable is assigned.
This module does not import the model class.
"""

import dataclasses
import logging

import keras
import numpy as np

from keras_vit.checkpoint import layout, sizes, source
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.metadata import POSEMB, input_kernel
from keras_vit.families import FAMILY_OPTIONS
from keras_vit.layers.position_embedding import (
    OFFICIAL,
    RESIZE_METHODS,
    resize_position_embedding,
)

logger = logging.getLogger("keras_vit")

# The layers a model may lack (include_top=False, no pre_logits), or have at another
# width (another number of classes): their arrays are then not taken.
TOP_LAYERS = ("pre_logits", "head")


@dataclasses.dataclass(frozen=True)
class Target:
    """What `fit_params` needs to know of the model the arrays go to.

    Attributes:
        name: the model's name (for messages).
        shapes: official name -> the variable's shape, in model order.
        grid_size: (rows, cols) of its position embeddings.
        num_prefix_tokens: the position embedding's rows before the grid's: 1
            for a class token that gets one, else 0.
    """

    name: str
    shapes: dict
    grid_size: tuple
    num_prefix_tokens: int

    @classmethod
    def of(cls, model):
        variables = layout.model_variables(model)
        embedding = model.get_layer("Transformer").position_embedding
        return cls(
            model.name,
            {name: tuple(variable.shape) for name, variable in variables.items()},
            tuple(model.grid_size),
            # The rows before the grid's: the class token's, unless it gets none.
            0 if embedding is None else embedding.num_embedded_prefix_tokens,
        )


def load_weights(model, weights, posemb_resize=None):
    """Loads `weights` (a registry name, an `.npz`, `.keras` or `.weights.h5`
    path, a trainers/ run directory: anything `open_source` takes, or a `Source`
    it opened) into `model`, resizing position embeddings (`posemb_resize`, as
    `load`) and replacing a head of another width by a fresh zero-initialised
    one. Returns the model."""
    if not isinstance(weights, source.Source):
        weights = source.open_source(weights, model_architecture(model))
    return load(model, weights, posemb_resize)


def model_architecture(model):
    """`source.architecture` of a built model."""
    return source.architecture(
        model.patch_size,
        model.hidden_size,
        model.mlp_dim,
        model.num_heads,
        model.num_layers,
        getattr(model, "resnet", None),
    )


def load(model, opened, posemb_resize=None):
    """Assigns the arrays of an opened `Source` to `model` (all-or-nothing).
    Returns the model. Where the file's family computes otherwise than the model
    (`keras_vit.families`: a timm file's exact GELU in a model of the tanh form,
    ...), a warning says so: the model's outputs are then not the file's.

    `posemb_resize`: how position embeddings of another grid are resized
    (`keras_vit.layers.position_embedding.RESIZE_METHODS`); None: as the code that
    wrote the file does (its metadata's 'posemb_resize': timm's bicubic for a
    timm file, transformers' for a transformers one), else 'official'."""
    if posemb_resize is not None and posemb_resize not in RESIZE_METHODS:
        raise ValueError(f"posemb_resize={posemb_resize!r} is not one of {RESIZE_METHODS}.")
    method = posemb_resize or opened.metadata.get("posemb_resize") or OFFICIAL
    values = assign_params(
        model, opened.read(model), opened.origin, opened.metadata.get("grid_size"), method
    )
    for key in FAMILY_OPTIONS:
        recorded, built = opened.metadata.get(key), getattr(model, key, None)
        if recorded is not None and built is not None and recorded != built:
            logger.warning(
                "%s: %s was written for %s=%r, the model has %r: its outputs differ from "
                "the source's (keras_vit.from_weights builds the model with the file's).",
                model.name,
                opened.origin,
                key,
                recorded,
                built,
            )
    for key, why in (opened.metadata.get(sizes.UNDETERMINED) or {}).items():
        logger.warning(
            "%s: %s does not say %s (%s); the model's %s=%r is used.",
            model.name,
            opened.origin,
            key,
            why,
            key,
            getattr(model, key, None),
        )
    return values


def assign_params(model, params, origin="checkpoint", grid_size=None, posemb_resize=OFFICIAL):
    """Checks `params` (official names -> arrays) against `model`, adapts them
    (`fit_params`), then assigns them all. Returns the model.

    Raises CheckpointError (nothing assigned) naming the first mismatched key with
    both shapes and listing missing/unexpected keys.
    """
    variables = layout.model_variables(model)
    values = fit_params(params, Target.of(model), origin, grid_size, posemb_resize)
    for name, value in values.items():
        variable = variables[name]
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))
    return model


def fit_params(params, target, origin="checkpoint", grid_size=None, posemb_resize=OFFICIAL):
    """The arrays to assign to `target` (a `Target`) from a checkpoint's `params`.

    Position embeddings of another resolution are resized by `posemb_resize`
    (`resize_position_embedding`'s method: 'official' as the official
    `interpolate_posembed`; the source grid is `grid_size`, or square).
    An RGB input kernel (the patch embedding's, a hybrid's 'conv_root') going to a
    model of C != 3 input channels is adapted (`adapt_input_channels`, one log
    line). A top layer (`TOP_LAYERS`) of another shape, or absent from the
    checkpoint, is left out (freshly initialised; a log line); one the model does
    not have is ignored (a log line).

    Returns:
        dict official name -> array of exactly the target's shape, for every
        variable of `target` but the fresh top layers.
    Raises:
        CheckpointError: a mismatched shape, missing or unexpected keys.
    """
    shapes = target.shapes
    stem = input_kernel(shapes)
    has = {_top(name) for name in shapes} - {None}
    missing = [n for n in shapes if n not in params and not _top(n)]
    unexpected = [n for n in params if n not in shapes and _top(n) in (None, *has)]
    ignored_top = sorted({_top(n) for n in params if _top(n) and _top(n) not in has})
    values, fresh, mismatch = {}, set(), None
    for name, expected in shapes.items():
        if name not in params:
            if _top(name):
                fresh.add(_top(name))
            continue
        value = np.asarray(params[name])
        if (
            name == POSEMB
            and value.shape != expected
            and value.ndim == 3
            and value.shape[-1] == expected[-1]
            and not missing
            and not unexpected
        ):
            value = _resize(value, grid_size, target, origin, posemb_resize)
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
                target.name,
                name,
                origin,
                expected[2],
                "summed over RGB"
                if expected[2] == 1
                else f"repeated and scaled by 3/{expected[2]}",
            )
        if value.shape != expected:
            if _top(name):
                fresh.add(_top(name))
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
            f"{origin} does not fit model '{target.name}': " + "; ".join(problems) + "."
        )
    for top in sorted(fresh):
        values = {name: value for name, value in values.items() if _top(name) != top}
        logger.info(
            "%s: '%s' is not taken from %s (absent or of another shape); "
            "it is freshly initialised.",
            target.name,
            top,
            origin,
        )
    for top in ignored_top:
        logger.info("%s: the checkpoint's '%s' is not used by this model.", target.name, top)
    return values


def adapt_input_channels(kernel, channels):
    """An RGB convolution kernel (kh, kw, 3, out) for `channels` input channels,
    as timm's `adapt_input_conv`: the sum over RGB for 1 channel (a grey image
    then gives what the RGB kernel gives it repeated to RGB); otherwise RGB
    repeated to `channels` (R, G, B, R, ...) and scaled by 3 / channels, which
    keeps the response's scale (exactly, for an input whose channels all hold one
    image, where `channels` is a multiple of 3).

    For a plain ViT and 1 channel that is exact: the model gives a grey image the
    logits the RGB model gives it repeated to RGB; a hybrid's weight-standardised
    stem only approximates that (an initialisation).

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


def _top(name):
    """The top layer ('head', 'pre_logits') a checkpoint key belongs to, or None."""
    layer, _, rest = name.partition("/")
    return layer if layer in TOP_LAYERS and rest and "/" not in rest else None


def _resize(value, grid_size, target, origin, method):
    try:
        return resize_position_embedding(
            value, grid_size, target.grid_size, target.num_prefix_tokens, method
        )
    except ValueError as e:
        raise CheckpointError(f"{origin}: '{POSEMB}' cannot be resized: {e}") from e


def _listing(names, limit=12):
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")
