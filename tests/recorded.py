"""The tests' one reader of floating-point values recorded in a file (tests/fixtures/).

A float32 result depends on the machine that computed it: the kernels' summation order
follows the instruction set (docs/testing.md, "Tolerances are derived, not fitted"), so a
value recorded on one CPU may differ by an ulp on another. A test may compare with a
recorded value only within a bound derived from the computation, never bit for bit.

`load_recorded` makes the bitwise comparison fail on every machine, the recording one
included: every floating-point value it returns is moved by one ulp of its dtype
(`np.nextafter`), alternately toward +inf and -inf in flat order. A comparison within a
derived bound is unaffected (one ulp of an O(1) float32 is 6e-8 to 1.2e-7); an exact one
fails where the test is written, not months later on a CPU of another kind.
Integers, strings and booleans come back as they are.
"""

import json
import os

import numpy as np

# JSON does not record the dtype of its numbers: these files hold float32 results.
JSON_DTYPE = np.float32


def moved(values):
    """`values` (a floating array) moved by one ulp of its dtype, element i toward +inf
    when i is even and toward -inf when odd (flat order)."""
    values = np.asarray(values)
    directions = np.where(np.arange(values.size) % 2 == 0, np.inf, -np.inf)
    return np.nextafter(values, directions.reshape(values.shape).astype(values.dtype))


def _checked(values, where):
    if not np.all(np.isfinite(values)):
        raise ValueError(
            f"{where} holds a non-finite value: a recorded inf or nan cannot be compared "
            "within a bound; record finite values"
        )
    return moved(values)


def _numeric_leaves(value):
    """The leaves of a nested list of numbers, or None when it holds anything else."""
    if isinstance(value, list):
        leaves = []
        for item in value:
            sub = _numeric_leaves(item)
            if sub is None:
                return None
            leaves.extend(sub)
        return leaves
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return [value]
    return None


def _from_json(value, where):
    """JSON with every float (or nested list of numbers holding one) as JSON_DTYPE,
    moved; the rest as parsed."""
    if isinstance(value, dict):
        return {key: _from_json(item, f"{where}[{key!r}]") for key, item in value.items()}
    leaves = _numeric_leaves(value)
    if leaves is not None and any(isinstance(leaf, float) for leaf in leaves):
        array = _checked(np.asarray(value, JSON_DTYPE), where)
        return array if isinstance(value, list) else array[()]
    if isinstance(value, list):
        return [_from_json(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value


def load_recorded(path):
    """The values recorded in `path` (.json, .npz or .npy), every float moved by one ulp.

    .npz: a dict of arrays; floating arrays keep their dtype. .json: the parsed object;
    every float, and every nested list of numbers holding a float, becomes a float32
    array (a float32 scalar for a lone float). .npy: the array."""
    path = os.fspath(path)
    if path.endswith(".json"):
        with open(path, encoding="utf-8") as f:
            return _from_json(json.load(f), os.path.basename(path))
    if path.endswith((".npz", ".npy")):
        if path.endswith(".npy"):
            arrays = {"": np.load(path, allow_pickle=False)}
        else:
            with np.load(path, allow_pickle=False) as data:
                arrays = dict(data)
        out = {
            key: _checked(array, f"{os.path.basename(path)}[{key!r}]")
            if np.issubdtype(array.dtype, np.floating)
            else array
            for key, array in arrays.items()
        }
        return out[""] if path.endswith(".npy") else out
    raise ValueError(f"{path}: load_recorded reads .json, .npz or .npy files")
