"""big_vision's own checkpoints (its models/vit.py layout) through `weights=`: SigLIP's
two-tower files (the image tower under `img/`, beside `txt/`, `t` and `b`), blocks one
by one or stacked by nn.scan, the position embedding at the top for the patches alone.
Each file is written here in that layout from a keras_vit model with random weights (the
names as big_vision's modules give them, not through keras_vit's writer), read back, and
must give the same arrays and outputs."""

import keras
import numpy as np
import pytest
from numpy_vit import random_params, to_linen_names, vit_forward
from tiny_models import tiny_vit

import keras_vit
from keras_vit.checkpoint import CheckpointError, model_params

SIZES = dict(patch_size=4, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)


def _random(model, seed):
    rng = np.random.default_rng(seed)
    model.set_weights(
        [w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


def big_vision_arrays(params, scanned, tower=None):
    """Arrays under the published names (`model_params`) under big_vision's: `pos_embedding`
    at the top, Linen block names, the blocks stacked on a first axis when `scanned`;
    under 'params/<tower>/'."""
    out = to_linen_names(params)
    out["pos_embedding"] = out.pop("Transformer/posembed_input/pos_embedding")
    if scanned:
        blocks = [k for k in out if k.startswith("Transformer/encoderblock_")]
        layers = 1 + max(int(k.split("/")[1].split("_")[1]) for k in blocks)
        for rest in {k.split("/", 2)[2] for k in blocks}:
            out[f"Transformer/encoderblock/{rest}"] = np.stack(
                [out.pop(f"Transformer/encoderblock_{i}/{rest}") for i in range(layers)]
            )
    prefix = f"params/{tower}/" if tower else "params/"
    return {prefix + name: value for name, value in out.items()}


def two_tower_file(path, image_tower, scanned):
    """A SigLIP-like file: the image tower (arrays under the published names), a text
    tower's arrays and SigLIP's logit temperature and bias."""
    rng = np.random.default_rng(3)
    text = {
        "params/txt/Embed_0/embedding": rng.normal(size=(11, 16)).astype("float32"),
        "params/txt/Encoder_0/encoder_norm/scale": np.ones(16, "float32"),
        "params/t": np.array([2.3], "float32"),
        "params/b": np.array([-10.0], "float32"),
    }
    np.savez(path, **big_vision_arrays(image_tower, scanned, "img"), **text)
    return str(path)


@pytest.fixture(scope="module")
def siglip():
    """A tiny SigLIP image tower: attention pooling, no class token, its projection."""
    return _random(tiny_vit(classifier="map", num_classes=6, **SIZES), 1)


@pytest.mark.parametrize("scanned", [False, True])
def test_a_siglip_two_tower_file_gives_its_image_tower(siglip, scanned, tmp_path, caplog):
    path = two_tower_file(tmp_path / "webli.npz", model_params(siglip), scanned)
    with caplog.at_level("INFO", logger="keras_vit"):
        model = keras_vit.from_weights(path, **SIZES)
    assert "two-tower checkpoint" in caplog.text and "txt" in caplog.text
    assert model.classifier == "map" and model.num_classes == 6
    assert model.image_size == siglip.image_size
    expected, got = model_params(siglip), model_params(model)
    assert list(got) == list(expected)
    for key, value in expected.items():
        np.testing.assert_array_equal(got[key], value, err_msg=key)
    x = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model(x)), keras.ops.convert_to_numpy(siglip(x))
    )


def test_the_image_tower_computes_the_numpy_references_attention_pooling(tmp_path):
    """Against the independent NumPy reference (tests/numpy_vit.py: big_vision's MAPHead
    written from its definition), float64: the fidelity bound of the official files."""
    params = random_params(
        patch=4, hidden=16, mlp=32, heads=2, layers=2, grid=(4, 4), num_classes=6,
        classifier="map", seed=4,
    )  # fmt: skip
    path = two_tower_file(tmp_path / "webli.npz", params, scanned=True)
    model = keras_vit.from_weights(path, **SIZES)
    x = np.random.default_rng(2).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    expected = vit_forward(params, x, num_layers=2, classifier="map")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(x)), expected, atol=1e-5, rtol=0)


def test_a_siglip_file_at_another_resolution_resizes_the_patches_grid(siglip, tmp_path):
    path = two_tower_file(tmp_path / "webli.npz", model_params(siglip), scanned=True)
    model = keras_vit.from_weights(path, **SIZES, image_size=24, include_top=False)
    assert model.get_layer("Transformer").position_embedding.pos_embedding.shape == (1, 36, 16)
    assert keras.ops.convert_to_numpy(model(np.zeros((1, 24, 24, 3), "float32"))).shape == (1, 16)


def test_a_class_token_model_of_big_vision_has_no_position_for_it(tmp_path):
    """big_vision adds the position embedding before the class token (pool_type 'tok')."""
    source = _random(tiny_vit(position_embedding_for_class_token=False, **SIZES), 2)
    path = str(tmp_path / "tok.npz")
    np.savez(path, **big_vision_arrays(model_params(source), scanned=False))
    model = keras_vit.from_weights(path, **SIZES)
    assert model.classifier == "token" and model.position_embedding_for_class_token is False
    x = np.random.default_rng(1).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model(x)), keras.ops.convert_to_numpy(source(x))
    )


def test_an_incomplete_image_tower_is_named(siglip, tmp_path):
    path = two_tower_file(tmp_path / "webli.npz", model_params(siglip), scanned=False)
    with np.load(path) as data:
        arrays = {k: data[k] for k in data.files if k != "params/img/MAPHead_0/LayerNorm_0/scale"}
    np.savez(path, **arrays)
    with pytest.raises(CheckpointError, match="MAPHead_0/LayerNorm_0/scale"):
        keras_vit.from_weights(path, **SIZES)


def test_scanned_blocks_of_different_depths_are_refused(tmp_path):
    path = str(tmp_path / "bad.npz")
    np.savez(
        path,
        **{
            "Transformer/encoderblock/LayerNorm_0/scale": np.ones((2, 4), "float32"),
            "Transformer/encoderblock/LayerNorm_0/bias": np.ones((3, 4), "float32"),
        },
    )
    with pytest.raises(CheckpointError, match="different lengths"):
        keras_vit.checkpoint.npz.read_npz(path)
