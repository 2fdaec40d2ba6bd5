"""Keras' own files as checkpoints, read directly: a `.keras` archive (a zip of
config.json and model.weights.h5), a `.weights.h5` file and the config written
beside one. The config is JSON; the arrays are read with h5py (a Keras
dependency). No model is built to read them: the model they go to names them
(`keras_vit.checkpoint.layout.keras_slots`).

No code runs from these files (the config is data; nothing is deserialised), and
the HDF5 file is read as Keras' own loader does: links other than plain ones,
external and virtual datasets, and arrays or zip members that declare far more
bytes than they store are refused.
"""

import contextlib
import json
import math
import os
import zipfile

import h5py
import ml_dtypes
import numpy as np

from keras_vit import run_directory
from keras_vit.checkpoint import layout
from keras_vit.checkpoint.errors import CheckpointError

# Inside a .keras archive, as Keras writes it.
ARCHIVE_CONFIG = "config.json"
ARCHIVE_WEIGHTS = "model.weights.h5"
WEIGHTS_SUFFIX = ".weights.h5"
# Beside `<stem>.weights.h5`: its model's config, `<stem>.config.json`
# (tools/convert_checkpoint.py writes it; `config_path`).
CONFIG_SUFFIX = ".config.json"
# An array or zip member declaring more than this, and more times what it stores
# than these, is a shape or decompression bomb (Keras' own limits, saving_lib).
_BOMB_FLOOR_BYTES = 1 << 32
_H5_MAX_EXPANSION = 1000
_ZIP_MAX_EXPANSION = 100


def config_path(weights):
    """`<stem>.config.json` for `<stem>.weights.h5`: where a weights file's model
    config is written beside it."""
    return weights[: -len(WEIGHTS_SUFFIX)] + CONFIG_SUFFIX


def read_config(path):
    """A model config written as JSON (`config_path`): the dict
    `VisionTransformer.get_config` gave. CheckpointError naming the file where it
    is not a JSON object."""
    try:
        with run_directory.open_file(path) as f:
            config = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path}: not valid JSON ({e}).") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{path}: not a model config (a JSON object).")
    return config


def config_beside(weights):
    """The model config beside a `.weights.h5` file, or None: `<stem>.config.json`
    (`config_path`), else the `model_config.json` of the folder it is in (a
    training run's, `keras_vit.run_directory`)."""
    own = config_path(weights)
    if run_directory.exists(own):
        return read_config(own)
    run = run_directory.RunDirectory(os.path.dirname(weights) or ".")
    return run.read_model_config() if run.has_model() else None


def read_archive_config(path):
    """The model config a `.keras` archive records (its config.json's 'config').

    Raises:
        CheckpointError: not a zip, no config.json or model.weights.h5 in it, or
            a model other than a keras_vit VisionTransformer (named).
    """
    try:
        with _archive(path) as archive:
            names = archive.namelist()
            missing = [n for n in (ARCHIVE_CONFIG, ARCHIVE_WEIGHTS) if n not in names]
            if missing:
                raise CheckpointError(f"{path} is not a Keras model archive: no {missing[0]}.")
            with _member(archive, ARCHIVE_CONFIG, path) as f:
                described = json.load(f)
    except (zipfile.BadZipFile, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise CheckpointError(f"{path} could not be read as a .keras model: {e}") from e
    config = described.get("config") if isinstance(described, dict) else None
    model = described.get("class_name") if isinstance(described, dict) else None
    if model != "VisionTransformer" or not isinstance(config, dict):
        raise CheckpointError(
            f"{path} does not hold a keras_vit model: its {ARCHIVE_CONFIG} describes "
            f"a {model or 'something else'}."
        )
    return config


def read_archive_arrays(path, model):
    """The arrays of a `.keras` archive's model.weights.h5, named for `model`
    (`read_weights`)."""

    @contextlib.contextmanager
    def weights():
        with _archive(path) as archive, _member(archive, ARCHIVE_WEIGHTS, path) as f:
            yield f

    return read_weights(weights, model, path)


def read_weights_file(path, model):
    """The arrays of a `.weights.h5` file, named for `model` (`read_weights`)."""
    return read_weights(lambda: run_directory.open_file(path, "rb"), model, path)


def read_weights(open_weights, model, origin):
    """The arrays of a Keras weights file, named for the model they go to.

    Args:
        open_weights: opens the HDF5 file (a context manager giving a binary file).
        model: the model the arrays go to: a file keeps its arrays by layer and
            number (`layout.keras_slots`), and `model` has the names.
        origin: the file's name, for messages.
    Returns:
        dict name -> array: official names where `model` has the slot; others
        (layers `model` lacks: a head it does not have, a deeper encoder's
        blocks) as '<layer path>/<number>'.
    Raises:
        CheckpointError: not an HDF5 file, a layer without its name (a file
            written before Keras 3.9), or a refused link, dataset or size.
    """
    names = {slot: name for name, slot in layout.keras_slots(model).items()}
    try:
        with open_weights() as f, h5py.File(f, "r") as h5:
            stored = _stored_arrays(h5, origin)
    except CheckpointError:
        raise
    except (OSError, ValueError, KeyError) as e:  # h5py: not HDF5, truncated
        raise CheckpointError(f"{origin} could not be read as a Keras weights file: {e}") from e
    return {names.get(slot, "/".join(slot)): value for slot, value in stored.items()}


def _stored_arrays(h5, origin):
    """{(layer path, number): array} of every layer variable in the file."""
    if "layers" not in h5:
        raise CheckpointError(f"{origin} holds no model layers: not a Keras weights file.")
    arrays = {}

    def walk(group, path):
        for key in group:
            item = _child(group, key, h5py.Group, origin)
            if key == "vars":
                continue
            here = path
            if "vars" in item:
                variables = _child(item, "vars", h5py.Group, origin)
                name = variables.attrs.get("name")
                if name is None:
                    raise CheckpointError(
                        f"{origin}: its layers carry no names (a file written by a Keras "
                        "before 3.9); load it with `model.load_weights` into a model of its "
                        "own architecture and save it again."
                    )
                here = path + (str(name),)
                for number in variables:
                    dataset = _child(variables, number, h5py.Dataset, origin)
                    arrays["/".join(here), number] = _array(dataset, origin)
            walk(item, here)

    walk(_child(h5, "layers", h5py.Group, origin), ())
    return arrays


def _child(group, key, kind, origin):
    """group[key], a plain (hard) link to a `kind` (Group or Dataset)."""
    link = group.get(key, getlink=True)
    if not isinstance(link, h5py.HardLink):
        where = f"{group.name.rstrip('/')}/{key}"
        raise CheckpointError(f"{origin}: '{where}' is a link ({type(link).__name__}), not read.")
    item = group[key]
    if not isinstance(item, kind):
        raise CheckpointError(f"{origin}: '{item.name}' is not a {kind.__name__}.")
    return item


def _array(dataset, origin):
    """A dataset's values, float32 where Keras stored bfloat16."""
    if dataset.external or dataset.is_virtual:
        raise CheckpointError(f"{origin}: '{dataset.name}' keeps its data outside the file.")
    declared = math.prod(dataset.shape) * dataset.dtype.itemsize
    stored = dataset.id.get_storage_size()
    if declared > _BOMB_FLOOR_BYTES and declared > _H5_MAX_EXPANSION * stored:
        raise CheckpointError(
            f"{origin}: '{dataset.name}' declares {declared} bytes but stores {stored}."
        )
    if dataset.attrs.get("dtype") == "bfloat16":
        return np.array(dataset, dtype=ml_dtypes.bfloat16).astype(np.float32)
    return np.asarray(dataset[()])


@contextlib.contextmanager
def _archive(path):
    if not run_directory.exists(path):
        raise FileNotFoundError(f"Weights file not found: {path}")
    with run_directory.open_file(path, "rb") as f, zipfile.ZipFile(f) as archive:
        yield archive


def _member(archive, name, origin):
    info = archive.getinfo(name)
    size, stored = info.file_size, info.compress_size
    if size > _BOMB_FLOOR_BYTES and size > _ZIP_MAX_EXPANSION * stored:
        raise CheckpointError(f"{origin}: '{name}' declares {size} bytes but stores {stored}.")
    return archive.open(name)
