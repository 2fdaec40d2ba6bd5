"""Reading and writing the official `.npz` checkpoint layout.

Checkpoints are flat `np.savez` archives of '/'-joined Flax parameter paths.
Published files use pre-Linen module names (`MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3`); files written by current Linen code use
`MultiHeadDotProductAttention_0`, `LayerNorm_1`, `MlpBlock_0`; some carry an
`opt/target/` or `params/` prefix. `canonical_names` maps all of them to the
published names, which are the ones `keras_vit` uses. Old hybrid files store
GroupNorm scale/bias as (1, 1, 1, C); they are read as (C,), as the official
`checkpoint._fix_groupnorm` does.
"""

import os
import re
import zipfile
import zlib

import numpy as np

from keras_vit.checkpoint.errors import CheckpointError

_PREFIXES = ("opt/target/", "params/", "target/")
# Linen module name -> published (pre-Linen) name, inside an encoder block.
_LINEN_BLOCK_NAMES = {
    "LayerNorm_0": "LayerNorm_0",
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
_BLOCK = re.compile(r"^(Transformer/encoderblock_\d+)/([^/]+)(/.*)$")
_GROUP_NORM = re.compile(r"(^|/)gn(\d+|_root|_proj)/(scale|bias)$")


def read_npz(path):
    """Reads every array of an `.npz` checkpoint (no pickles).

    Returns:
        dict name -> float32/int numpy array, names canonicalised
        (`canonical_names`).
    Raises:
        FileNotFoundError: no such file.
        CheckpointError: not an npz archive, truncated or corrupt, pickled
            objects, or no arrays.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Checkpoint file not found: {path}")
    with open(path, "rb") as f:
        magic = f.read(6)
    if not magic.startswith((b"PK\x03\x04", b"PK\x05\x06", b"\x93NUMPY")):
        # np.load takes any other bytes for a pickle and answers with advice to load it
        # unsafely; what the file is not is the useful answer.
        raise CheckpointError(
            f"{path} is not an .npz checkpoint: it starts with {magic!r}, not a zip archive "
            "(np.savez) header."
        )
    try:
        archive = np.load(path, allow_pickle=False)
        if not isinstance(archive, np.lib.npyio.NpzFile):
            raise CheckpointError(f"{path} is a single .npy array, not an .npz checkpoint.")
        with archive:
            params = {name: archive[name] for name in archive.files}
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, EOFError, zlib.error) as e:
        raise CheckpointError(f"{path} is truncated or corrupt: {e}") from e
    except (ValueError, OSError) as e:
        raise CheckpointError(f"{path} is not an .npz checkpoint: {e}") from e
    if not params:
        raise CheckpointError(f"{path} holds no arrays.")
    for name, value in params.items():
        if value.dtype.kind not in "fiub":
            raise CheckpointError(
                f"{path}: key '{name}' has dtype {value.dtype}, not a numeric array."
            )
    return canonical_names(params)


def canonical_names(params):
    """Strips `opt/target/` / `params/` prefixes, maps Linen block module names
    to the published pre-Linen ones and reshapes old (1, 1, 1, C) GroupNorm
    scale/bias to (C,). Raises CheckpointError on a name clash."""
    out = {}
    linen_blocks = {
        m.group(1)
        for name in params
        if (m := _BLOCK.match(_strip(name)))
        and m.group(2) in ("MlpBlock_0", "MultiHeadDotProductAttention_0")
    }
    for name, value in params.items():
        new = _strip(name)
        m = _BLOCK.match(new)
        if m and m.group(1) in linen_blocks:
            new = m.group(1) + "/" + _LINEN_BLOCK_NAMES.get(m.group(2), m.group(2)) + m.group(3)
        if new in out:
            raise CheckpointError(f"checkpoint key '{name}' duplicates '{new}'.")
        if _GROUP_NORM.search(new) and value.ndim == 4 and value.shape[:3] == (1, 1, 1):
            value = value.reshape(value.shape[-1:])
        out[new] = value
    return out


def _strip(name):
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def save_npz(path, params):
    """Writes `params` (name -> array) as an uncompressed official-layout `.npz`."""
    np.savez(path, **{name: np.asarray(value) for name, value in params.items()})
