"""Checkpoint files: layouts, registry downloads (from a local cache), bad inputs."""

import json
import os
import zipfile

import keras
import numpy as np
import pytest
from numpy_vit import random_params, vit_forward

import keras_vit
from keras_vit.checkpoint import CheckpointError, registry

SMALL = dict(patch=8, hidden=16, mlp=32, heads=2, layers=2)
SMALL_KW = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)


@pytest.fixture
def ckpt(tmp_path):
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, seed=0)
    path = tmp_path / "small.npz"
    np.savez(path, **params)
    return str(path), params


def build(weights=None, **kwargs):
    return keras_vit.from_weights(weights, **{**SMALL_KW, **kwargs})


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing.npz"):
        keras_vit.checkpoint.read_npz(tmp_path / "nothing.npz")


def test_unknown_registry_name_lists_known_ones():
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(
            ValueError,
            match=r"'imagenet22k'.*registered: .*augreg.*imagenet21k.*'augreg:<AugReg file "
            r"name>' or an https:// / gs:// URL",
        ):
            keras_vit.ViT_B16(weights="imagenet22k")


def test_file_that_is_not_a_checkpoint(tmp_path):
    path = tmp_path / "notes.npz"
    path.write_text("these are not weights")
    with pytest.raises(CheckpointError, match="notes.npz is not an .npz checkpoint"):
        build(weights=str(path))


def test_truncated_file(tmp_path, ckpt):
    data = open(ckpt[0], "rb").read()
    path = tmp_path / "truncated.npz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated.npz"):
        build(weights=str(path))


def test_corrupt_member(tmp_path, ckpt):
    """A zip whose member bytes are damaged (CRC mismatch)."""
    src = zipfile.ZipFile(ckpt[0])
    path = tmp_path / "corrupt.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as out:
        for info in src.infolist():
            out.writestr(info.filename, src.read(info.filename))
    raw = bytearray(path.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(64)
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupt.npz is truncated or corrupt"):
        build(weights=str(path))


def test_single_npy_array_is_rejected(tmp_path):
    path = tmp_path / "array.npy"
    np.save(path, np.zeros(3))
    with pytest.raises(CheckpointError, match="single .npy array"):
        build(weights=str(path))


def test_pickled_objects_are_rejected(tmp_path):
    path = tmp_path / "pickled.npz"
    np.savez(path, cls=np.array([{"a": 1}], dtype=object))
    with pytest.raises(CheckpointError, match="pickled.npz"):
        build(weights=str(path))


def test_random_bytes_are_named_as_not_an_archive_with_no_advice_to_unpickle(tmp_path):
    path = tmp_path / "random.npz"
    path.write_bytes(np.random.default_rng(0).bytes(4096))
    with pytest.raises(CheckpointError, match="random.npz is not an .npz checkpoint") as info:
        build(weights=str(path))
    assert "pickle" not in str(info.value)


def test_other_architecture_names_first_mismatched_key(ckpt):
    with pytest.raises(CheckpointError) as info:
        build(hidden_size=32, weights=ckpt[0])
    message = str(info.value)
    assert "small.npz" in message
    assert (
        "first mismatched key 'embedding/kernel': checkpoint shape (8, 8, 3, 16) "
        "vs model shape (8, 8, 3, 32)" in message
    )


def test_missing_and_unexpected_keys_are_listed(tmp_path, ckpt):
    params = dict(ckpt[1])
    del params["Transformer/encoderblock_1/LayerNorm_2/scale"]
    params["Transformer/encoderblock_7/LayerNorm_0/scale"] = np.ones(16, np.float32)
    path = tmp_path / "edited.npz"
    np.savez(path, **params)
    with pytest.raises(CheckpointError) as info:
        build(weights=str(path))
    message = str(info.value)
    assert "1 missing keys: Transformer/encoderblock_1/LayerNorm_2/scale" in message
    assert "1 unexpected keys: Transformer/encoderblock_7/LayerNorm_0/scale" in message


def test_deeper_checkpoint_into_shallower_model_is_refused(ckpt):
    with pytest.raises(CheckpointError, match="unexpected keys: Transformer/encoderblock_1/"):
        build(num_layers=1, weights=ckpt[0])


def test_gap_model_refuses_token_checkpoint(ckpt):
    with pytest.raises(CheckpointError, match="unexpected keys: cls"):
        build(classifier="gap", weights=ckpt[0])


def test_no_partial_load(tmp_path, ckpt):
    model = build(image_size=32, num_classes=3)
    before = [w.copy() for w in model.get_weights()]
    params = dict(ckpt[1])
    params["Transformer/encoder_norm/bias"] = np.zeros(17, np.float32)
    with pytest.raises(CheckpointError, match="encoder_norm/bias"):
        keras_vit.checkpoint.assign_params(model, params, "edited")
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_resize_and_fresh_head_are_logged(ckpt, caplog):
    with caplog.at_level("INFO", logger="keras_vit"):
        build(image_size=48, num_classes=4, weights=ckpt[0])
    text = caplog.text
    assert "Resizing position embeddings from a 4x4 grid to 6x6" in text
    assert "'head' is not taken" in text


def test_save_checkpoint_round_trip(tmp_path, ckpt, rng):
    model = build(weights=ckpt[0])
    out = tmp_path / "again.npz"
    keras_vit.save_checkpoint(model, out)
    again = keras_vit.checkpoint.read_npz(out)
    assert set(again) == set(ckpt[1])
    for name, value in ckpt[1].items():
        np.testing.assert_array_equal(again[name], value)


def test_keras_file_as_weights_with_new_resolution(tmp_path, ckpt, rng):
    model = build(weights=ckpt[0])
    path = str(tmp_path / "model.keras")
    model.save(path)
    bigger = build(image_size=48, weights=path)
    x = rng.uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(
        bigger.predict(x, verbose=0), vit_forward(ckpt[1], x, num_layers=2), atol=1e-5
    )


def test_weights_h5(tmp_path, ckpt, rng):
    model = build(weights=ckpt[0])
    path = str(tmp_path / "model.weights.h5")
    model.save_weights(path)
    again = build(image_size=32, num_classes=3, representation_size=None, weights=path)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_array_equal(again.predict(x, verbose=0), model.predict(x, verbose=0))
    with pytest.raises(CheckpointError, match="model.weights.h5"):
        build(image_size=32, num_classes=3, hidden_size=32, weights=path)


def test_run_directory_and_weights_h5_with_config(tmp_path, ckpt, rng):
    """A trainers/ run dir (model_config.json + model.weights.h5) can go to another
    head and resolution, like an npz."""
    model = build(weights=ckpt[0])
    run = tmp_path / "run"
    run.mkdir()
    model.save_weights(str(run / "model.weights.h5"))
    (run / "model_config.json").write_text(json.dumps(model.get_config()))
    x = rng.uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    for weights in (run, run / "model.weights.h5"):
        features = build(image_size=48, include_top=False, weights=str(weights))
        np.testing.assert_allclose(
            features.predict(x, verbose=0),
            vit_forward(ckpt[1], x, num_layers=2, include_head=False),
            atol=1e-5,
        )
    assert not np.any(build(num_classes=7, weights=str(run)).predict(x[:, :32, :32], verbose=0))


def test_registry_name_downloads_through_keras_cache(tmp_path, monkeypatch, rng):
    """The real download path, served from Keras' cache (no network here); what
    the model looks like comes from the file, not from the entry."""
    monkeypatch.setenv("KERAS_VIT_CACHE_DIR", str(tmp_path / "keras_home"))
    entry = registry.Entry(url=f"{registry.BASE_URL}/imagenet21k%2Bimagenet2012/Tiny.npz")
    monkeypatch.setitem(registry.REGISTRY, ("Tiny", "imagenet21k+imagenet2012"), entry)
    params = random_params(
        **SMALL, grid=(4, 4), num_classes=3, classifier="gap", representation_size=8, seed=5
    )
    cache = tmp_path / "keras_home" / "keras_vit" / "imagenet21k+imagenet2012"
    assert registry.cache_path(entry) == str(cache / "Tiny.npz")
    cache.mkdir(parents=True)
    np.savez(cache / "Tiny.npz", **params)
    config = dict(SMALL_KW, variant="Tiny")
    source = keras_vit.checkpoint.open_source("imagenet21k+imagenet2012", config)
    assert source.origin == str(cache / "Tiny.npz")
    assert source.metadata == {
        "image_size": 32,
        "num_classes": 3,
        "channels": 3,
        "classifier": "gap",
        "representation_size": 8,
    }


def test_registry_entries_are_well_formed():
    for (variant, _name), entry in registry.REGISTRY.items():
        assert variant in keras_vit.VARIANTS or "R" in variant, variant
        assert entry.url.startswith("https://storage.googleapis.com/vit_models/")
        assert entry.url.endswith(".npz")
        assert entry.image_size in (224, 384)
    entry = registry.lookup("ViT_B16", "imagenet21k")
    assert entry.url.endswith("/imagenet21k/ViT-B_16.npz")
    assert entry.num_classes == 21843 and entry.representation_size == 768
    assert registry.lookup("ViT_L16", "imagenet21k+imagenet2012").image_size == 384


def test_loader_and_model_import_without_a_cycle():
    """checkpoint.loader imports first in a fresh interpreter; the checkpoint
    package and the run directory import no model (nor what builds one), and the
    model module imports neither the factory nor the checkpoint package, at any
    level (tests/test_import_graph.py: no circle anywhere)."""
    import ast
    import pathlib
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(keras_vit.__file__)))
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import keras_vit.checkpoint.loader as l; "
            "import keras_vit.vision_transformer as v; print(l.__name__, v.__name__)",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    def imported(path):
        tree = ast.parse(open(path, encoding="utf-8").read())
        names = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                names.add(node.module)
                names.update(f"{node.module}.{a.name}" for a in node.names)
            elif isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
        return names

    package = pathlib.Path(root) / "keras_vit"
    builders = ("vision_transformer", "builders", "factory", "hybrid")
    readers = [*sorted((package / "checkpoint").glob("*.py")), package / "run_directory.py"]
    assert package / "checkpoint" / "loader.py" in readers
    for path in readers:
        names = imported(path)
        assert not {n for n in names if any(m in n for m in builders)}, path
    names = imported(package / "vision_transformer.py")
    assert not {n for n in names if "factory" in n or "checkpoint" in n}, names
    assert "keras_vit.vision_transformer" in imported(package / "factory.py")
