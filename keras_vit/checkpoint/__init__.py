"""Checkpoints: the official `.npz` layout, the published registry, Keras' own
files, timm's and Hugging Face transformers' (read, and written back by
`save_timm` / `save_transformers`); one entry point that opens any of them (`open_source`) and a loader that
assigns what it opened to a built model."""

from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.layout import model_params, model_variables
from keras_vit.checkpoint.loader import assign_params, load, load_weights
from keras_vit.checkpoint.npz import canonical_names, read_npz, save_npz
from keras_vit.checkpoint.source import Source, open_source
from keras_vit.checkpoint.timm_writer import save_timm
from keras_vit.checkpoint.transformers_format import save_transformers
from keras_vit.families import FAMILY_DEFAULTS


def save_checkpoint(model, path):
    """Writes `model`'s weights as an official-layout `.npz` (published names).

    Raises:
        CheckpointError: a model whose family options (`keras_vit.families`) or
            input normalisation (`preprocessing`) are not the official ones: an
            `.npz` records none, so the file would
            load into another computation (write a `.keras` file, or the
            family's own layout: `save_timm`, `save_transformers`).
    """
    other = {
        key: getattr(model, key)
        for key, official in FAMILY_DEFAULTS.items()
        if getattr(model, key, official) != official
    }
    if getattr(model, "preprocessing", None) is not None:  # the official: None
        other["preprocessing"] = model.preprocessing
    official = {**FAMILY_DEFAULTS, "preprocessing": None}
    if other:
        raise CheckpointError(
            f"{model.name}: an official .npz records no family options, and this model has "
            + ", ".join(f"{key}={value!r}" for key, value in other.items())
            + " (the official model: "
            + ", ".join(f"{key}={official[key]!r}" for key in other)
            + "); write a .keras file, or use save_timm / save_transformers."
        )
    save_npz(path, model_params(model))


__all__ = [
    "CheckpointError",
    "Source",
    "assign_params",
    "canonical_names",
    "load",
    "load_weights",
    "model_params",
    "model_variables",
    "open_source",
    "read_npz",
    "save_checkpoint",
    "save_npz",
    "save_timm",
    "save_transformers",
]
