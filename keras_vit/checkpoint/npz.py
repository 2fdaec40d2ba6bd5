"""Reading and writing the official `.npz` checkpoint layout.

Checkpoints are flat `np.savez` archives of '/'-joined Flax parameter paths.
Published files use pre-Linen module names (`MultiHeadDotProductAttention_1`,
`LayerNorm_2`, `MlpBlock_3`); files written by current Linen code use
`MultiHeadDotProductAttention_0`, `LayerNorm_1`, `MlpBlock_0`; some carry an
`opt/target/` or `params/` prefix. `canonical_names` maps all of them to the
published names, which are the ones `keras_vit` uses. Old hybrid files store
GroupNorm scale/bias as (1, 1, 1, C); they are read as (C,), as the official
`checkpoint._fix_groupnorm` does.

big_vision's files (its `models/vit.py`; SigLIP's two-tower checkpoints, e.g.
`webli_en_b16_224_63724782.npz`): the position embedding at the top
(`pos_embedding`, the patches' alone: big_vision adds it before the class token),
the blocks either one by one or stacked along a first axis by `nn.scan`
(`Transformer/encoderblock/...`), attention pooling under `MAPHead_0`. A two-tower
file's image tower is its `img/` subtree, as big_vision's `file.npz:img` reads it; the
text tower (`txt/`) and the logit scale and bias (`t`, `b`) are left out, in one log
line.
"""

import logging
import os
import re
import zipfile
import zlib

import numpy as np

from keras_vit.checkpoint.errors import CheckpointError
from keras_vit.checkpoint.metadata import POSEMB

_PREFIXES = ("opt/target/", "params/", "target/")
IMAGE_TOWER = "img/"  # a two-tower (image-text) file's image encoder: big_vision's ':img'
BIG_VISION_POSEMB = "pos_embedding"  # big_vision's, at the top: the patches' alone
_SCANNED = "Transformer/encoderblock/"  # nn.scan's blocks, stacked along axis 0
logger = logging.getLogger("keras_vit")
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
    """Strips `opt/target/` / `params/` prefixes, takes a two-tower file's image tower,
    unstacks scanned blocks, maps Linen block module names to the published pre-Linen
    ones, big_vision's top-level `pos_embedding` to the published name, and reshapes
    old (1, 1, 1, C) GroupNorm scale/bias to (C,). Raises CheckpointError on a name
    clash."""
    params = _unscanned(_image_tower({_strip(name): value for name, value in params.items()}))
    if BIG_VISION_POSEMB in params:
        if POSEMB in params:
            raise CheckpointError(f"checkpoint keys '{BIG_VISION_POSEMB}' and '{POSEMB}' clash.")
        params[POSEMB] = params.pop(BIG_VISION_POSEMB)
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


def _image_tower(params):
    """A two-tower file's image tower (`IMAGE_TOWER` stripped), or `params` as they are."""
    if not any(name.startswith(IMAGE_TOWER) for name in params):
        return params
    tower = {n[len(IMAGE_TOWER) :]: v for n, v in params.items() if n.startswith(IMAGE_TOWER)}
    others = sorted({name.split("/")[0] for name in params if not name.startswith(IMAGE_TOWER)})
    logger.info(
        "a two-tower checkpoint: its image tower (%s) is read; %s not (%d arrays)",
        IMAGE_TOWER,
        ", ".join(others),
        len(params) - len(tower),
    )
    return tower


def _unscanned(params):
    """nn.scan's stacked blocks (`Transformer/encoderblock/...`, layers on axis 0) as
    `Transformer/encoderblock_{i}/...`, as big_vision's `scan_to_pyloop`."""
    stacked = {n[len(_SCANNED) :]: v for n, v in params.items() if n.startswith(_SCANNED)}
    if not stacked:
        return params
    depths = {np.shape(v)[0] for v in stacked.values()}
    if len(depths) != 1:
        raise CheckpointError(
            f"the stacked blocks ({_SCANNED}...) have first axes of different lengths: "
            f"{sorted(depths)}."
        )
    out = {n: v for n, v in params.items() if not n.startswith(_SCANNED)}
    for layer in range(depths.pop()):
        for name, value in stacked.items():
            out[f"Transformer/encoderblock_{layer}/{name}"] = np.asarray(value[layer])
    return out


def _strip(name):
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def save_npz(path, params):
    """Writes `params` (name -> array) as an uncompressed official-layout `.npz`."""
    np.savez(path, **{name: np.asarray(value) for name, value in params.items()})
