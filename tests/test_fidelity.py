"""Official-layout checkpoints give the logits of an independent NumPy reference."""

import keras
import numpy as np
import pytest
from numpy_vit import random_params, to_linen_names, vit_forward

import keras_vit

# float32 Keras vs float64 NumPy: the model-level goal, fixed (measured: a few 1e-6).
ATOL = 1e-5

# Under torch, jit_compile=True is torch.compile, not XLA: minutes of compiling per model
# on a CPU (these 11 cases: 13 min on 2 cores, all passing), so there only no_xla runs:
# eager, which is what "auto" means under torch.
XLA = pytest.param(
    True,
    id="xla",
    marks=pytest.mark.skipif(
        keras.backend.backend() == "torch", reason="no XLA under torch (torch.compile: minutes)"
    ),
)


@pytest.fixture(params=[XLA, pytest.param(False, id="no_xla")])
def jit_compile(request):
    """Both compiled paths of `predict`: XLA, and TensorFlow's own kernels (oneDNN, or
    Eigen with TF_ENABLE_ONEDNN_OPTS=0), whichever the default rule would pick here.
    (JAX always compiles with XLA; there both ids run the same path. torch: eager only.)"""
    return request.param


def _predict(model, x, jit_compile):
    model.jit_compile = jit_compile
    return model.predict(x, verbose=0)


def _images(rng, batch, height, width):
    return rng.uniform(-1, 1, (batch, height, width, 3)).astype(np.float32)


def _save(tmp_path, params, name="ckpt.npz"):
    path = tmp_path / name
    np.savez(path, **params)
    return str(path)


TI16 = dict(patch=16, hidden=192, mlp=768, heads=3, layers=12)
TI16_KW = dict(patch_size=16, hidden_size=192, mlp_dim=768, num_heads=3)


def test_token_model_named_builder(tmp_path, rng, jit_compile):
    params = random_params(**TI16, grid=(14, 14), num_classes=7, seed=1)
    model = keras_vit.ViT_Ti16(weights=_save(tmp_path, params), num_classes=7)
    x = _images(rng, 2, 224, 224)
    expected = vit_forward(params, x, num_layers=12)
    np.testing.assert_allclose(_predict(model, x, jit_compile), expected, atol=ATOL, rtol=0)
    assert model.image_size == (224, 224)


def test_position_embedding_resize_224_to_288(tmp_path, rng, jit_compile):
    # ViT-Ti/16's width, heads and 14x14 grid, two blocks: the resize is the position
    # embedding's, which the depth does not change (the named builder at full depth is
    # test_token_model_named_builder's).
    params = random_params(**{**TI16, "layers": 2}, grid=(14, 14), num_classes=5, seed=2)
    model = keras_vit.from_weights(
        _save(tmp_path, params), **TI16_KW, num_layers=2, num_classes=5, image_size=288
    )
    assert model.grid_size == (18, 18)
    x = _images(rng, 2, 288, 288)
    expected = vit_forward(params, x, num_layers=2)
    np.testing.assert_allclose(_predict(model, x, jit_compile), expected, atol=ATOL, rtol=0)


SMALL = dict(patch=8, hidden=48, mlp=96, heads=4, layers=3)
SMALL_KW = dict(patch_size=8, hidden_size=48, mlp_dim=96, num_heads=4, num_layers=3)


def test_pre_logits_model(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=11, representation_size=48, seed=3)
    model = keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW)
    assert model.representation_size == 48 and model.num_classes == 11
    x = _images(rng, 3, 32, 32)
    np.testing.assert_allclose(
        _predict(model, x, jit_compile), vit_forward(params, x, num_layers=3), atol=ATOL, rtol=0
    )


def test_gap_model(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=6, classifier="gap", seed=4)
    model = keras_vit.from_weights(
        _save(tmp_path, params), **SMALL_KW, classifier="gap", num_classes=6
    )
    x = _images(rng, 3, 32, 32)
    np.testing.assert_allclose(
        _predict(model, x, jit_compile),
        vit_forward(params, x, num_layers=3, classifier="gap"),
        atol=ATOL,
        rtol=0,
    )


def test_gap_model_resized_and_non_square(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=6, classifier="gap", seed=5)
    model = keras_vit.from_weights(
        _save(tmp_path, params), **SMALL_KW, classifier="gap", image_size=(48, 40)
    )
    assert model.grid_size == (6, 5)
    x = _images(rng, 2, 48, 40)
    np.testing.assert_allclose(
        _predict(model, x, jit_compile),
        vit_forward(params, x, num_layers=3, classifier="gap"),
        atol=ATOL,
        rtol=0,
    )


def test_non_square_token_model(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=4, seed=6)
    model = keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW, image_size=(24, 56))
    x = _images(rng, 2, 24, 56)
    np.testing.assert_allclose(
        _predict(model, x, jit_compile), vit_forward(params, x, num_layers=3), atol=ATOL, rtol=0
    )


@pytest.mark.parametrize("prefix", ["", "opt/target/", "params/"])
def test_linen_names_and_prefixes(tmp_path, rng, prefix, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, seed=7)
    path = _save(tmp_path, to_linen_names(params, prefix))
    model = keras_vit.from_weights(path, **SMALL_KW)
    x = _images(rng, 2, 32, 32)
    np.testing.assert_allclose(
        _predict(model, x, jit_compile), vit_forward(params, x, num_layers=3), atol=ATOL, rtol=0
    )


def test_include_top_false_gives_representation(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, representation_size=16, seed=8)
    model = keras_vit.from_weights(_save(tmp_path, params), **SMALL_KW, include_top=False)
    x = _images(rng, 2, 32, 32)
    out = _predict(model, x, jit_compile)
    assert out.shape == (2, 16)
    np.testing.assert_allclose(
        out, vit_forward(params, x, num_layers=3, include_head=False), atol=ATOL, rtol=0
    )


def test_new_num_classes_gives_zero_head_and_keeps_body(tmp_path, rng, jit_compile):
    params = random_params(**SMALL, grid=(4, 4), num_classes=3, seed=9)
    path = _save(tmp_path, params)
    model = keras_vit.from_weights(path, **SMALL_KW, num_classes=9)
    x = _images(rng, 2, 32, 32)
    assert np.all(_predict(model, x, jit_compile) == 0)
    features = keras_vit.from_weights(path, **SMALL_KW, include_top=False)
    np.testing.assert_allclose(
        _predict(features, x, jit_compile),
        vit_forward(params, x, num_layers=3, include_head=False),
        atol=ATOL,
        rtol=0,
    )


def test_reference_resize_matches_scipy_zoom():
    """The reference's hand-written interpolation is scipy.ndimage.zoom(order=1)."""
    import scipy.ndimage

    grid = np.random.default_rng(0).standard_normal((7, 7, 5))
    from numpy_vit import linear_resize_corner_aligned

    np.testing.assert_allclose(
        linear_resize_corner_aligned(grid, 12, 9),
        scipy.ndimage.zoom(grid, (12 / 7, 9 / 7, 1), order=1),
        atol=1e-12,
    )
