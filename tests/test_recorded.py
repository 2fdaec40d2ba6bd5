"""tests/recorded.py: recorded floats come back one ulp away, so that a bitwise
comparison with them fails on every machine while one within a bound passes; and no
test reads a file of tests/fixtures/ but through it."""

import ast
import json
import os

import numpy as np
import pytest
from float_bounds import assert_within
from recorded import load_recorded

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")


def _raw_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _check_moved(got, raw):
    """`got` is `raw`'s neighbour in its dtype (no value between them, at most one
    ulp away), alternately above and below; a bitwise comparison fails, one within
    that ulp passes."""
    raw = np.asarray(raw)
    assert got.dtype == raw.dtype and got.shape == raw.shape
    up = np.arange(raw.size).reshape(raw.shape) % 2 == 0
    assert np.all((got > raw) == up) and np.all((got < raw) == ~up)
    np.testing.assert_array_equal(np.nextafter(got, raw), raw)  # neighbours
    ulp = np.spacing(np.abs(raw))
    assert np.all(np.abs(got.astype(np.float64) - raw) <= ulp)
    with pytest.raises(AssertionError):
        np.testing.assert_array_equal(got, raw)
    assert_within(got, raw, ulp, "one ulp")


def test_npz_floats_moved_one_ulp_and_the_rest_as_recorded(tmp_path):
    path = tmp_path / "r.npz"
    values = {
        "f32": np.array([[1.0, -0.5, 3.25], [0.0, 1e-30, -2.0]], np.float32),
        "f64": np.array([1.0, 2.0], np.float64),
        "f16": np.array([1.5], np.float16),
        "labels": np.array([3, 1], np.int64),
    }
    np.savez(path, **values)
    got = load_recorded(path)
    assert sorted(got) == sorted(values)
    for key in ("f32", "f64", "f16"):
        _check_moved(got[key], values[key])
    np.testing.assert_array_equal(got["labels"], values["labels"])  # integers: exact
    np.save(tmp_path / "one.npy", values["f32"])
    _check_moved(load_recorded(tmp_path / "one.npy"), values["f32"])


def test_json_floats_become_moved_float32_and_the_rest_as_recorded(tmp_path):
    path = tmp_path / "r.json"
    path.write_text(
        json.dumps({"logits": [[1.25, -2.0], [0.5, 3]], "scale": 0.1, "shape": [4, 8], "name": "a"})
    )
    got = load_recorded(path)
    _check_moved(got["logits"], np.array([[1.25, -2.0], [0.5, 3]], np.float32))
    assert got["scale"].dtype == np.float32 and got["scale"] == np.nextafter(
        np.float32(0.1), np.float32(np.inf)
    )
    assert got["shape"] == [4, 8] and got["name"] == "a"


def test_non_finite_and_unknown_files_are_refused_by_name(tmp_path):
    np.savez(tmp_path / "bad.npz", x=np.array([1.0, np.nan], np.float32))
    with pytest.raises(ValueError, match=r"bad.npz\['x'\] holds a non-finite value"):
        load_recorded(tmp_path / "bad.npz")
    (tmp_path / "bad.json").write_text('{"y": [1.5, Infinity]}')
    with pytest.raises(ValueError, match=r"bad.json\['y'\] holds a non-finite value"):
        load_recorded(tmp_path / "bad.json")
    with pytest.raises(ValueError, match=r"r.csv: load_recorded reads .json, .npz or .npy"):
        load_recorded(tmp_path / "r.csv")


def _float_leaves(value):
    if isinstance(value, dict):
        return [leaf for item in value.values() for leaf in _float_leaves(item)]
    if isinstance(value, list):
        return [leaf for item in value for leaf in _float_leaves(item)]
    return [value] if isinstance(value, float) else []


@pytest.mark.parametrize("name", ["default_model.json", "interop/reference.npz"])
def test_committed_fixtures_fail_a_bitwise_comparison(name):
    """Every float of each committed file of recorded results comes back one ulp
    away: compared bit for bit, it fails here, where it may have been recorded."""
    path = os.path.join(FIXTURES, name)
    got = load_recorded(path)
    if name.endswith(".npz"):
        with np.load(path) as data:
            raw = dict(data)
        for key, value in raw.items():
            _check_moved(got[key], value)
    else:
        raw = _raw_json(path)
        moved = [key for key, value in raw.items() if _float_leaves(value)]
        assert moved, "the file records no float"
        for key in moved:
            _check_moved(got[key], np.asarray(raw[key], np.float32))


# --- Nothing reads tests/fixtures/ around the reader ---------------------------------

# Calls that read a file's contents (a fixture's weights go to keras_vit's loaders,
# which are not among them: a model's inputs, not results to compare with).
READERS = {"load", "loads", "loadtxt", "genfromtxt", "fromfile", "open", "read_text"}
# The reader, its test (which reads the raw files to show the move), and the script
# that writes the fixtures.
EXEMPT = {"recorded.py", "test_recorded.py", os.path.join("fixtures", "make_interop_fixtures.py")}


def _mentions_fixtures(node, tainted):
    for sub in ast.walk(node):
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            if "fixtures" in sub.value:
                return True
        if isinstance(sub, ast.Name) and sub.id in tainted:
            return True
    return False


def fixture_reads(source):
    """[(line, call)] of the calls in `source` that read a file of tests/fixtures/: a
    reader (READERS) whose argument names 'fixtures', FIXTURES, or a module-level name
    or function made from one of them."""
    tree = ast.parse(source)
    tainted = {"FIXTURES"}
    grew = True
    while grew:
        grew = False
        for node in tree.body:
            if isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            elif isinstance(node, ast.FunctionDef):
                names = [node.name]
            else:
                continue
            if set(names) - tainted and _mentions_fixtures(node, tainted):
                tainted |= set(names)
                grew = True
    reads = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        if name not in READERS:
            continue
        if any(_mentions_fixtures(arg, tainted) for arg in [*node.args, func]):
            reads.append((node.lineno, ast.unparse(node)))
    return reads


def test_the_guard_finds_a_fixture_read_around_the_reader():
    """The guard below catches the forms a read takes, and not a weights path."""
    source = (
        "FIXTURES = os.path.join(HERE, 'fixtures', 'interop')\n"
        "REFERENCE = os.path.join(FIXTURES, 'reference.npz')\n"
        "def path(name):\n    return os.path.join(FIXTURES, name)\n"
        "with open(os.path.join(HERE, 'fixtures', 'x.json')) as f:\n    json.load(f)\n"
        "np.load(REFERENCE)\n"
        "np.load(path('a.npz'))\n"
        "keras_vit.from_weights(path('timm_token'))\n"
    )
    assert sorted(line for line, _ in fixture_reads(source)) == [5, 7, 8]


def test_no_test_reads_a_fixture_but_through_the_reader():
    found = []
    for folder, _, files in os.walk(HERE):
        for file in sorted(files):
            path = os.path.join(folder, file)
            if not file.endswith(".py") or os.path.relpath(path, HERE) in EXEMPT:
                continue
            with open(path, encoding="utf-8") as f:
                for line, call in fixture_reads(f.read()):
                    found.append(f"{os.path.relpath(path, HERE)}:{line}: {call}")
    assert not found, (
        "read tests/fixtures/ through tests/recorded.py's load_recorded: " + "; ".join(found)
    )
