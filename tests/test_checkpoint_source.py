"""The one checkpoint entry point (keras_vit.checkpoint.source): each `weights`
value is of one kind, decided once; Keras' own files are read directly, without a
second model, and refused where Keras' own loader would refuse them; a run
directory's problems are one error type, and --init=RUN reads the run's model
config once."""

import json
import os
import shutil
import types

import h5py
import keras
import numpy as np
import pytest
from numpy_vit import random_params, vit_forward

import keras_vit
from keras_vit import run_directory
from keras_vit.checkpoint import CheckpointError, keras_files, source

SMALL = dict(patch=8, hidden=16, mlp=32, heads=2, layers=2)
SMALL_KW = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)
AUGREG = "augreg:B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"


def kind_of(weights):
    return next(kind.name for kind in source.KINDS if kind.claims(weights))


@pytest.mark.parametrize(
    "weights,kind",
    [
        (AUGREG, "AugReg file name"),
        ("https://example.com/vit/B_16.npz", "URL"),
        ("http://example.com/vit/B_16.npz", "URL"),  # refused by the registry, as a URL
        ("https://example.com/vit/model.keras", "URL"),
        ("gs://bucket/vit/B_16.npz", "URL"),
        ("gs://bucket/run/model.keras", ".keras file"),
        ("model.keras", ".keras file"),
        (os.path.join("run", "model.weights.h5"), ".weights.h5 file"),
        ("B_16.npz", ".npz file"),
        (os.path.join("nowhere", "B_16"), ".npz file"),
        ("imagenet21k", "registry name"),
    ],
)
def test_each_weights_value_is_of_one_kind(weights, kind):
    assert kind_of(weights) == kind


def test_paths_on_disk_are_of_their_kind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "run").mkdir()
    (tmp_path / "imagenet21k").write_bytes(b"")  # an existing file wins over a short name
    assert kind_of("run") == "run directory"
    assert kind_of("imagenet21k") == ".npz file"
    assert kind_of("imagenet22k") == "registry name"


@pytest.fixture
def saved(tmp_path):
    """(params, model, folder): a small model holding random official params, saved
    as model.keras and as model.weights.h5 with model.config.json beside it."""
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, seed=0)
    model = keras_vit.VisionTransformer(**SMALL_KW, image_size=32, num_classes=3)
    keras_vit.checkpoint.assign_params(model, params)
    model.save(tmp_path / "model.keras")
    weights = str(tmp_path / "model.weights.h5")
    model.save_weights(weights)
    with open(keras_files.config_path(weights), "w") as f:
        json.dump(model.get_config(), f)
    return params, model, tmp_path


@pytest.mark.parametrize("name", ["model.keras", "model.weights.h5"])
def test_keras_files_are_read_without_a_second_model(saved, monkeypatch, rng, name):
    """The file's config and arrays are read as data: one model is built (the one
    asked for, at another resolution here), and Keras' loader is not used."""
    params, _, folder = saved
    built = []
    build = keras_vit.VisionTransformer._build  # every construction runs it once

    def counting_build(self, **arguments):
        built.append(arguments["image_size"])
        build(self, **arguments)

    def refuse(*args, **kwargs):
        raise AssertionError("Keras' loader was used")

    monkeypatch.setattr(keras_vit.VisionTransformer, "_build", counting_build)
    monkeypatch.setattr(keras.saving, "load_model", refuse)
    monkeypatch.setattr(keras.Model, "load_weights", refuse)
    opened = keras_vit.checkpoint.open_source(str(folder / name))
    assert opened.kind == kind_of(name) and opened.origin == str(folder / name)
    assert opened.metadata["grid_size"] == (4, 4) and opened.config["num_classes"] == 3
    model = keras_vit.from_weights(opened, **SMALL_KW, image_size=48)
    assert built == [(48, 48)] and model.num_classes == 3
    x = rng.uniform(-1, 1, (2, 48, 48, 3)).astype("float32")
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(x)), vit_forward(params, x, num_layers=2), atol=1e-5
    )


def test_a_file_that_records_the_model_needs_no_arguments(saved, rng):
    """A .keras file or a run directory records the whole model: `from_weights(path)`
    builds its sizes (README, "Checkpoints"); an argument given still wins."""
    params, model, folder = saved
    run_directory.RunDirectory(str(folder / "run")).write_model(model)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    for path in (folder / "model.keras", folder / "run"):
        built = keras_vit.from_weights(str(path))
        assert (built.hidden_size, built.num_layers, built.image_size) == (16, 2, (32, 32))
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(built(x)), vit_forward(params, x, num_layers=2), atol=1e-5
        )
    with pytest.raises(CheckpointError):
        keras_vit.from_weights(str(folder / "run"), hidden_size=32)


def test_bfloat16_weights_are_read(tmp_path):
    """Keras stores bfloat16 variables with a dtype attribute; they load exactly
    (bfloat16 values are float32 values)."""
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, seed=1)
    half = keras_vit.VisionTransformer(**SMALL_KW, image_size=32, num_classes=3, dtype="bfloat16")
    keras_vit.checkpoint.assign_params(half, params)
    path = str(tmp_path / "half.weights.h5")
    half.save_weights(path)
    model = keras_vit.from_weights(path, **SMALL_KW, image_size=32, num_classes=3)
    for name, value in keras_vit.checkpoint.model_params(half).items():
        got = keras.ops.convert_to_numpy(keras_vit.checkpoint.model_variables(model)[name])
        np.testing.assert_array_equal(got, value.astype("float32"), err_msg=name)


def _edited(saved, edit):
    """A copy of the saved .weights.h5 (no config beside it), edited by edit(h5)."""
    _, model, folder = saved
    path = folder / "edited.weights.h5"
    shutil.copy(folder / "model.weights.h5", path)
    with h5py.File(path, "a") as h5:
        edit(h5)
    return model, str(path)


@pytest.mark.parametrize(
    "link,kind",
    [
        (lambda: h5py.SoftLink("/layers/patch_embedding/vars/1"), "SoftLink"),
        (lambda: h5py.ExternalLink("other.h5", "/x"), "ExternalLink"),
    ],
)
def test_links_in_a_weights_file_are_refused(saved, link, kind):
    def replace(h5):
        del h5["layers/patch_embedding/vars/0"]
        h5["layers/patch_embedding/vars/0"] = link()

    model, path = _edited(saved, replace)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(
        CheckpointError,
        match=rf"edited.weights.h5: '/layers/patch_embedding/vars/0' is a link \({kind}\)",
    ):
        keras_vit.load_weights(model, path)
    for a, b in zip(before, model.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_a_weights_file_without_layer_names_is_refused_naming_the_way(saved):
    def strip(h5):
        h5.visititems(
            lambda name, item: item.attrs.pop("name", None) if name.endswith("vars") else None
        )

    model, path = _edited(saved, strip)
    with pytest.raises(
        CheckpointError, match=r"edited.weights.h5: its layers carry no names .*load_weights"
    ):
        keras_vit.load_weights(model, path)


def test_another_keras_model_is_refused(tmp_path):
    path = str(tmp_path / "dense.keras")
    keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)]).save(path)
    with pytest.raises(
        CheckpointError, match=r"dense.keras does not hold a keras_vit model: .*Sequential"
    ):
        keras_vit.from_weights(path, **SMALL_KW)
    notes = tmp_path / "notes.keras"
    notes.write_text("not a zip")
    with pytest.raises(CheckpointError, match=r"notes.keras could not be read as a .keras model"):
        keras_vit.from_weights(str(notes), **SMALL_KW)


def test_a_bad_run_directory_is_one_error_type(saved):
    _, model, folder = saved
    run = folder / "run"
    run.mkdir()
    error = run_directory.RunDirectoryError
    with pytest.raises(error, match=r"run is not a finished training run: missing .*model_config"):
        keras_vit.from_weights(str(run), **SMALL_KW)
    run_directory.RunDirectory(str(run)).write_model(model)
    (run / run_directory.MODEL_CONFIG).write_text("[1, 2]")
    for read in (
        lambda: keras_vit.load_weights(model, str(run)),
        run_directory.RunDirectory(str(run)).read_model,
    ):
        with pytest.raises(error, match="model_config.json: not a model config"):
            read()
    (run / run_directory.MODEL_CONFIG).write_text("{")
    with pytest.raises(error, match="model_config.json: not valid JSON"):
        keras_vit.load_weights(model, str(run))
    # Written whole again, the run reads back through Keras' registry (no model import).
    run_directory.RunDirectory(str(run)).write_model(model)
    again = run_directory.RunDirectory(str(run)).read_model()
    assert type(again) is keras_vit.VisionTransformer
    for a, b in zip(again.get_weights(), model.get_weights()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
def test_finetune_init_run_reads_the_model_config_once(saved, monkeypatch):
    """--init=RUN: model_factory builds the run's model and load_init loads it,
    from one read of model_config.json (train_lib.open_init)."""
    from keras_vit_trainers import train_lib

    params, model, folder = saved
    run = run_directory.RunDirectory(str(folder / "run"))
    run.write_model(model)
    reads = []
    read_json = run_directory.RunDirectory.read_json
    monkeypatch.setattr(
        run_directory.RunDirectory,
        "read_json",
        lambda self, path: reads.append(path) or read_json(self, path),
    )
    config = types.SimpleNamespace(model="ViT_B16", model_overrides={}, image_size=48)
    init = train_lib.open_init(run.path)
    fresh = train_lib.model_factory(config, init)(num_classes=5)
    train_lib.load_init(fresh, init)
    assert reads == [run.model_config]
    assert (fresh.hidden_size, fresh.image_size, fresh.num_classes) == (16, (48, 48), 5)
    resized = keras_vit.from_weights(str(folder / "model.keras"), **SMALL_KW, image_size=48)
    for a, b in zip(
        fresh.get_layer("Transformer").get_weights(), resized.get_layer("Transformer").get_weights()
    ):
        np.testing.assert_array_equal(a, b)
