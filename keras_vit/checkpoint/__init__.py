"""Checkpoints: the official `.npz` layout, the published registry, loading."""

from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.layout import model_params, model_variables
from keras_vit.checkpoint.loader import assign_params, load_weights
from keras_vit.checkpoint.npz import canonical_names, read_npz, save_npz


def save_checkpoint(model, path):
    """Writes `model`'s weights as an official-layout `.npz` (published names)."""
    save_npz(path, model_params(model))


__all__ = [
    "CheckpointError",
    "assign_params",
    "canonical_names",
    "load_weights",
    "model_params",
    "model_variables",
    "read_npz",
    "save_checkpoint",
    "save_npz",
]
