"""PyTorch state dicts on disk, as NumPy arrays: the files timm and Hugging Face
transformers write.

    .safetensors   read and written with the `safetensors` package's NumPy API:
                   no torch (`pip install safetensors`, or keras_vit[interop])
    .bin / .pth    a pickle, read with `torch.load(..., weights_only=True)` (which
                   refuses anything but tensors and plain containers): torch needed

Both keep a model in the Hugging Face Hub's directory layout: `config.json`
beside `model.safetensors` (or `pytorch_model.bin`); `HUB_CONFIG`,
`HUB_WEIGHTS`, `weights_in` and `read_config` own it.

Arrays keep PyTorch's layouts (Linear (out, in), Conv2d (out, in, kh, kw));
`keras_vit.checkpoint.torch_layout` converts them. Floating arrays are read as
float32 (bfloat16 and float16 exactly widened).
"""

import json
import os

import ml_dtypes  # noqa: F401  (a Keras dependency: registers bfloat16 with NumPy)
import numpy as np

from keras_vit import run_directory
from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.preprocessing import check_preprocessing

SAFETENSORS = (".safetensors",)
PICKLES = (".bin", ".pth", ".pt")
SUFFIXES = SAFETENSORS + PICKLES
HUB_CONFIG = "config.json"
HUB_WEIGHTS = ("model.safetensors", "pytorch_model.bin")  # the first is preferred
HUB_PREPROCESSOR = "preprocessor_config.json"  # transformers' image processor (normalisation)
# What transformers requires of a safetensors file's metadata (PyTorch tensors).
SAFETENSORS_METADATA = {"format": "pt"}


def is_state_dict_path(path):
    """Whether `path` names a state dict file by its suffix."""
    return os.fspath(path).endswith(SUFFIXES)


def weights_in(directory, family):
    """The weights file of a Hub directory of `family` ('timm', 'transformers'):
    model.safetensors, else pytorch_model.bin. Raises CheckpointError where
    there is neither (a sharded checkpoint, whose index names several files, is
    not read)."""
    for name in HUB_WEIGHTS:
        path = os.path.join(directory, name)
        if os.path.isfile(path):
            return path
    raise CheckpointError(
        f"{directory}: a {family} directory without {' or '.join(HUB_WEIGHTS)} (sharded "
        "checkpoints are not read)."
    )


def read_config(path):
    """A JSON config file (a Hub directory's config.json) as a dict. Raises
    CheckpointError naming the file."""
    try:
        with run_directory.open_file(path) as f:  # local, or a path with a scheme
            config = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path} is not a readable JSON config: {e}") from e
    if not isinstance(config, dict):
        raise CheckpointError(f"{path} is not a JSON object.")
    return config


def write_config(directory, config, name=HUB_CONFIG):
    """Writes `config` as the directory's `name` JSON file (config.json; indented,
    as the Hub's)."""
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def read_state_dict(path):
    """Every array of a state dict file.

    Returns:
        dict key -> numpy array (floating arrays float32), in the file's order;
        a training checkpoint's wrapping ('model' / 'state_dict') and a
        DataParallel 'module.' prefix removed.
    Raises:
        FileNotFoundError: no such file.
        ImportError: safetensors (for .safetensors) or torch (for .bin/.pth) is
            not installed; the message names the file and what to install.
        CheckpointError: not a readable state dict, or a non-numeric entry.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Weights file not found: {path}")
    arrays = _read_safetensors(path) if path.endswith(SAFETENSORS) else _read_pickle(path)
    if not arrays:
        raise CheckpointError(f"{path} holds no arrays.")
    if all(key.startswith("module.") for key in arrays):
        arrays = {key[len("module.") :]: value for key, value in arrays.items()}
    return {key: _widened(path, key, value) for key, value in arrays.items()}


def write_safetensors(path, arrays):
    """Writes `arrays` (key -> numpy array) as a `.safetensors` file that torch,
    timm and transformers read (contiguous arrays, metadata format 'pt')."""
    numpy_api = _safetensors_numpy(path)
    tensors = {key: np.ascontiguousarray(value) for key, value in arrays.items()}
    numpy_api.save_file(tensors, os.fspath(path), metadata=dict(SAFETENSORS_METADATA))


def _read_safetensors(path):
    numpy_api = _safetensors_numpy(path)
    try:
        return dict(numpy_api.load_file(path))
    except Exception as e:  # safetensors raises its own SafetensorError, and OSError
        raise CheckpointError(f"{path} is not a readable .safetensors file: {e}") from e


def _read_pickle(path):
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"{path} is a PyTorch pickle ({os.path.splitext(path)[1]}): reading it needs "
            "torch (pip install torch), or convert it to .safetensors first (which keras_vit "
            "reads without torch)."
        ) from None
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # weights_only refuses any other object; a bad file fails here
        raise CheckpointError(f"{path} is not a readable PyTorch state dict: {e}") from e
    for wrapper in ("model", "state_dict"):
        if isinstance(loaded, dict) and isinstance(loaded.get(wrapper), dict):
            loaded = loaded[wrapper]
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path} holds a {type(loaded).__name__}, not a state dict.")
    arrays = {}
    for key, value in loaded.items():
        if not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"{path}: key '{key}' holds a {type(value).__name__}, not a tensor."
            )
        value = value.detach().cpu()
        if value.is_floating_point():
            value = value.float()
        arrays[key] = value.numpy()
    return arrays


def _widened(path, key, value):
    value = np.asarray(value)
    if value.dtype.kind == "f" or value.dtype == ml_dtypes.bfloat16:
        return value.astype(np.float32)
    if value.dtype.kind not in "iub":
        raise CheckpointError(f"{path}: key '{key}' has dtype {value.dtype}, not a numeric array.")
    return value


def _safetensors_numpy(path):
    try:
        import safetensors.numpy
    except ImportError:
        raise ImportError(
            f"{path}: .safetensors files need the safetensors package "
            "(pip install safetensors, or keras_vit[interop])."
        ) from None
    return safetensors.numpy


def checked_preprocessing(mean, std, where):
    """{"mean", "std"} as a file states them (`keras_vit.preprocessing.
    check_preprocessing`), a CheckpointError naming `where` when they are malformed."""
    try:
        return check_preprocessing({"mean": mean, "std": std}, where=where)
    except ValueError as e:
        raise CheckpointError(str(e)) from e
