""".ci/wheel_check.py's checks (`make wheel-check` runs them on the real wheel): each one
passes a right input and stops a wrong one with a line naming the problem. Fake trees and
archives, no build: milliseconds."""

import importlib.util
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("wheel_check", ROOT / ".ci" / "wheel_check.py")
wheel_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wheel_check)

SETUP_CFG = """
[metadata]
name = pkg
version = attr: pkg.__version__

[options]
packages =
    pkg
    pkg.sub
    pkg_tools
package_dir =
    pkg_tools = tools

[options.package_data]
pkg = data/*.txt
"""

SOURCES = {
    # The version is read without importing pkg: the import of a missing module would fail.
    "pkg/__init__.py": 'import a_module_not_installed\n\n__version__ = "1.2.3"\n',
    "pkg/model.py": "X = 1\n",
    "pkg/sub/__init__.py": "",
    "pkg/data/classes.txt": "a\nb\n",
    "pkg/data/notes.md": "not package data\n",
    "tools/__init__.py": "",
    "tools/export.py": "Y = 2\n",
}
# What setuptools puts in the wheel: {path in the wheel: source}.
WHEEL_FILES = {
    "pkg/__init__.py": "pkg/__init__.py",
    "pkg/model.py": "pkg/model.py",
    "pkg/sub/__init__.py": "pkg/sub/__init__.py",
    "pkg/data/classes.txt": "pkg/data/classes.txt",
    "pkg_tools/__init__.py": "tools/__init__.py",
    "pkg_tools/export.py": "tools/export.py",
}


@pytest.fixture
def tree(tmp_path):
    src = tmp_path / "src"
    for name, text in {**SOURCES, "setup.cfg": SETUP_CFG}.items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_text(text)
    return src


def _wheel(tmp_path, src, files=WHEEL_FILES, changed=None):
    """A wheel-like zip: {path in it: source path or None (empty)}, plus its metadata."""
    path = tmp_path / "pkg-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, source in files.items():
            data = (src / source).read_bytes() if source else b""
            archive.writestr(name, b"changed" if name == changed else data)
        archive.writestr("pkg-1.2.3.dist-info/METADATA", "Name: pkg\n")
    return path


def test_layout_from_setup_cfg(tree):
    version, folders, package_data = wheel_check.package_layout(tree / "setup.cfg")
    assert version == "1.2.3"
    assert folders == {"pkg": "pkg", "pkg.sub": "pkg/sub", "pkg_tools": "tools"}
    assert package_data == {"pkg": ["data/*.txt"]}


def test_the_right_wheel_passes(tmp_path, tree):
    layout = wheel_check.package_layout(tree / "setup.cfg")[1:]
    wheel = _wheel(tmp_path, tree)
    assert wheel_check.check_wheel_files(wheel, tree, *layout) == len(WHEEL_FILES)


@pytest.mark.parametrize(
    "files, changed, message",
    [
        (
            {k: v for k, v in WHEEL_FILES.items() if k != "pkg/data/classes.txt"},
            None,
            "lacks pkg/data/classes.txt",
        ),
        ({**WHEEL_FILES, "tests/test_model.py": None}, None, "holds tests/test_model.py"),
        (WHEEL_FILES, "pkg/model.py", "pkg/model.py differs"),
    ],
    ids=["missing_data", "junk", "changed"],
)
def test_a_wrong_wheel_is_named(tmp_path, tree, files, changed, message):
    layout = wheel_check.package_layout(tree / "setup.cfg")[1:]
    with pytest.raises(wheel_check.CheckError, match=message):
        wheel_check.check_wheel_files(_wheel(tmp_path, tree, files, changed), tree, *layout)


def test_a_subpackage_missing_from_setup_cfg_is_named(tmp_path, tree):
    (tree / "pkg" / "extra").mkdir()
    (tree / "pkg" / "extra" / "__init__.py").write_text("")
    layout = wheel_check.package_layout(tree / "setup.cfg")[1:]
    wheel = _wheel(tmp_path, tree)  # what setuptools builds: the listed packages
    with pytest.raises(wheel_check.CheckError, match=r"lacks pkg/extra/__init__\.py"):
        wheel_check.check_wheel_files(wheel, tree, *layout)


def _sdist(tmp_path, members):
    path = tmp_path / "pkg-1.2.3.tar.gz"
    empty = tmp_path / "empty"
    empty.write_text("")
    with tarfile.open(path, "w:gz") as archive:
        for member in members:
            archive.add(empty, arcname=member)
    return path


SDIST = ["pkg-1.2.3/PKG-INFO", "pkg-1.2.3/setup.cfg", "pkg-1.2.3/pkg/model.py"]
SDIST += ["pkg-1.2.3/tools/export.py", "pkg-1.2.3/pkg.egg-info/SOURCES.txt", "pkg-1.2.3/LICENSE"]


def test_sdist_files(tmp_path, tree):
    folders = wheel_check.package_layout(tree / "setup.cfg")[1]
    wheel_check.check_sdist_files(_sdist(tmp_path, SDIST), folders, "pkg", "1.2.3")
    junk = _sdist(tmp_path, [*SDIST, "pkg-1.2.3/tests/test_model.py"])
    with pytest.raises(wheel_check.CheckError, match="holds pkg-1.2.3/tests/test_model.py"):
        wheel_check.check_sdist_files(junk, folders, "pkg", "1.2.3")


EXPECTED = np.array([[1.0, -2.0, 0.5]])
ATOL = 1e-5
DECODED = [[["n0", "tench", 1.0]]]
REPORT = dict(
    backend="numpy",
    module="/venv/lib/python3.11/site-packages/pkg/__init__.py",
    prefix="/venv",
    version="1.2.3",
    installed_version="1.2.3",
    imported=[],
    distributions=["jax", "keras", "numpy", "pkg"],
    decoded=DECODED,
)


def _check(logits=EXPECTED, **changes):
    return wheel_check.check_installed(
        {**REPORT, **changes}, np.asarray(logits, np.float32), EXPECTED, ATOL, DECODED, "1.2.3"
    )


def test_the_right_run_passes():
    # A difference of half the tolerance passes.
    assert _check(EXPECTED + 0.5 * ATOL) <= ATOL


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(backend="jax"), "jax backend, not numpy"),
        (dict(module="/work/main/pkg/__init__.py"), "came from /work/main"),
        (dict(imported=["tensorflow"]), r"loaded \['tensorflow'\]"),
        (dict(distributions=["keras", "tensorflow-cpu"]), r"pulled in \['tensorflow-cpu'\]"),
        (dict(version="1.2.4"), "__version__ is '1.2.4'"),
        (dict(installed_version="1.2.4"), "metadata says '1.2.4'"),
        (dict(decoded=[[["n1", "goldfish", 1.0]]]), "decode_predictions gave"),
        (dict(logits=EXPECTED + 2 * ATOL), r"logits\[\(0, 0\)\]"),
        (dict(logits=[[np.nan, -2.0, 0.5]]), r"logits\[\(0, 0\)\] = nan"),
        (dict(logits=EXPECTED[:, :2]), "logits of shape"),
    ],
    ids=[
        "backend",
        "module",
        "imported",
        "distributions",
        "version",
        "installed_version",
        "decoded",
        "logits_off",
        "logits_nan",
        "logits_shape",
    ],
)
def test_a_wrong_run_is_named(changes, message):
    with pytest.raises(wheel_check.CheckError, match=message):
        _check(**changes)


def test_the_programs_wrote_only_under_their_folder():
    site = {"keras_vit", "keras"}
    wheel_check.check_written(set(wheel_check.WRITTEN), site, site)
    with pytest.raises(wheel_check.CheckError, match=r"holds \['data', 'images', 'junk', 'runs'\]"):
        wheel_check.check_written({*wheel_check.WRITTEN, "junk"}, site, site)
    with pytest.raises(wheel_check.CheckError, match=r"wrote \['runs'\] into site-packages"):
        wheel_check.check_written(set(wheel_check.WRITTEN), site, {*site, "runs"})


def test_the_help_check_wants_the_programs_own_usage():
    wheel_check.check_help("Usage:\n  keras-vit-pretrain --config=X --model_dir=RUN\nExample: ...")
    with pytest.raises(wheel_check.CheckError, match="printed no 'Example'"):
        wheel_check.check_help("USAGE: keras-vit-pretrain --config=X --model_dir=RUN")


def test_the_image_folder_is_what_make_tfrecords_reads(tmp_path):
    wheel_check.write_images(tmp_path)
    for split, count in wheel_check.IMAGE_SPLITS.items():
        for name in wheel_check.IMAGE_CLASSES:
            assert len(list((tmp_path / split / name).glob("*.png"))) == count
