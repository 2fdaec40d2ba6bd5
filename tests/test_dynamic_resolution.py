"""Any resolution at call time (`input_shape=(None, None, 3)`): the position embeddings
are resized in the graph to each batch's grid, with the numbers of the load-time resize
(the official `interpolate_posembed`), so a model of any size gives the logits of a model
built at that size from the same checkpoint. Plain and hybrid, square and not, with and
without XLA, under TensorFlow here and under JAX in one subprocess."""

import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from float_bounds import U, assert_within
from numpy_resnet import hybrid_forward, random_hybrid_params
from numpy_vit import random_params, vit_forward
from test_fidelity import XLA  # the "xla" case: skipped under torch (torch.compile)

import keras_vit
from keras_vit import inspect as vit_inspect
from keras_vit.layers import PositionEmbedding

# float32 Keras vs float64 NumPy, and against a model built at the size: the model-level
# goal, fixed (docs/testing.md); hybrids against NumPy: the hybrids' bar.
ATOL = 1e-5
HYBRID_ATOL = 1e-4
ANY_SIZE = (None, None, 3)

# A plain token model whose embeddings cover a 4x4 grid (16 px). TALL resizes the rows
# up and the columns down (a 6x3 grid), WIDE the other way round (3x7).
PLAIN = dict(patch=4, hidden=32, mlp=64, heads=2, layers=2)
PLAIN_KW = dict(patch_size=4, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)
TALL, WIDE = (24, 12), (12, 28)
# A stem-only hybrid (stride 4) with 2x2 patches: a 4x4 grid at 32 px. ODD, 40x30 px,
# gives a 10x8 feature map (odd and even 'SAME' steps), a 5x4 grid.
HYBRID = dict(patch=2, hidden=32, mlp=64, heads=2, layers=2)
HYBRID_KW = dict(resnet=(), patch_size=2, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)
ODD = (40, 30)


@pytest.fixture(params=[XLA, pytest.param(False, id="no_xla")])
def jit_compile(request):
    return request.param


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """(plain params, path), (hybrid params, path): random official-layout checkpoints."""
    folder = tmp_path_factory.mktemp("ckpt")
    plain = random_params(**PLAIN, grid=(4, 4), num_classes=5, seed=21)
    hybrid = random_hybrid_params(resnet=(), **HYBRID, grid=(4, 4), num_classes=3, seed=22)
    paths = []
    for name, params in (("plain", plain), ("hybrid", hybrid)):
        paths.append(str(folder / f"{name}.npz"))
        np.savez(paths[-1], **params)
    return (plain, paths[0]), (hybrid, paths[1])


def _images(seed, size, batch=2):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, *size, 3)).astype(np.float32)


def _predict(model, x, jit_compile):
    model.jit_compile = jit_compile
    return model.predict(x, verbose=0)


# -- The in-graph resize ---------------------------------------------------------------


def _table(rng, grid, prefix, hidden=6):
    layer = PositionEmbedding(grid, prefix)
    layer.build((None, prefix + grid[0] * grid[1], hidden))
    layer.pos_embedding.assign(rng.standard_normal(layer.pos_embedding.shape).astype("float32"))
    return layer


def _neighbours(n_in, n_out):
    """The two source indices each output index blends on one axis (corner-aligned)."""
    coords = np.arange(n_out) * ((n_in - 1) / (n_out - 1)) if n_out > 1 else np.zeros(1)
    low = np.floor(coords).astype(int)
    return low, np.minimum(low + 1, n_in - 1)


def _resize_bound(layer, grid):
    """|at_grid - resized| bound, per element. On one axis the result is
    fl((1 - t) a + t b), t one correctly rounded division: the weights are within u
    (absolute: t + (1 - t) = 1), the products and the sum one rounding each, so the
    error is at most 3u (|a| + |b|). The second axis blends two such results (each at
    most |a| + |b| in size) and carries their errors: 6u times S, the sum of the four
    neighbours' |value|. scipy computes in float64 and rounds its float32 output once:
    0.5u |y| <= 0.5u S more."""
    table = keras.ops.convert_to_numpy(layer.pos_embedding)[0, layer.num_prefix_tokens :]
    table = np.abs(table.astype(np.float64)).reshape(*layer.grid_size, -1)
    (row_lo, row_hi), (col_lo, col_hi) = (
        _neighbours(n_in, n_out) for n_in, n_out in zip(layer.grid_size, grid)
    )
    s = sum(table[rows][:, cols] for rows in (row_lo, row_hi) for cols in (col_lo, col_hi))
    return 6.5 * U * s.reshape(1, grid[0] * grid[1], -1)


@pytest.mark.parametrize(
    "old,prefix,new",
    [
        ((4, 4), 1, (6, 3)),  # rows up, columns down
        ((3, 5), 0, (7, 9)),  # a non-square table, no class token
        ((4, 4), 1, (1, 5)),  # a single row
        ((1, 1), 1, (3, 2)),  # a single cell, repeated
        ((5, 2), 0, (5, 2)),  # its own grid: the table itself
    ],
)
def test_at_grid_gives_the_numbers_of_the_load_time_resize(rng, old, prefix, new):
    layer = _table(rng, old, prefix)
    got = keras.ops.convert_to_numpy(layer.at_grid(new))
    want = layer.resized(new)  # scipy.ndimage.zoom(order=1), as the official code
    assert got.shape == want.shape == (1, prefix + new[0] * new[1], 6)
    np.testing.assert_array_equal(got[:, :prefix], want[:, :prefix])  # prefix kept as is
    assert_within(got[:, prefix:], want[:, prefix:], _resize_bound(layer, new), f"{old}->{new}")
    if new == old:
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="traces a tf.function")
def test_at_grid_with_sizes_unknown_until_run_in_a_tensorflow_graph(rng):
    """Under TensorFlow a traced graph can leave the sizes unknown (None): the grid is
    then a tensor, and the resize must still give the same numbers, XLA or not."""
    assert keras.backend.backend() == "tensorflow"
    import tensorflow as tf

    layer = _table(rng, (4, 4), 1)
    for jit in (True, False):
        fn = tf.function(
            lambda patch_map: layer.at_grid(tf.unstack(tf.shape(patch_map)[1:3])),
            input_signature=[tf.TensorSpec((None, None, None, 1))],
            jit_compile=jit,
        )
        for grid in ((6, 3), (2, 7)):
            got = fn(tf.zeros((1, *grid, 1))).numpy()
            want = layer.resized(grid)
            np.testing.assert_array_equal(got[:, :1], want[:, :1])
            assert_within(got[:, 1:], want[:, 1:], _resize_bound(layer, grid), f"{grid} {jit}")


# -- Whole models ---------------------------------------------------------------------


def test_plain_model_at_any_size_equals_a_model_built_at_that_size(checkpoints, jit_compile):
    """One model, `predict` on two sizes: the first traces with the sizes known, the
    second (TensorFlow relaxes the traced shapes) with them unknown."""
    (params, path), _ = checkpoints
    model = keras_vit.from_weights(**PLAIN_KW, weights=path, input_shape=ANY_SIZE)
    assert model.dynamic_size and model.input_shape == (None, None, None, 3)
    assert model.image_size == (16, 16) and model.grid_size == (4, 4)  # the embeddings'
    for seed, size in enumerate((TALL, WIDE)):
        x = _images(seed, size)
        logits = _predict(model, x, jit_compile)
        built = keras_vit.from_weights(**PLAIN_KW, weights=path, image_size=size)
        np.testing.assert_allclose(logits, built(x), atol=ATOL, rtol=0, err_msg=str(size))
        expected = vit_forward(params, x, num_layers=2)
        np.testing.assert_allclose(logits, expected, atol=ATOL, rtol=0, err_msg=str(size))


def test_at_its_own_size_a_model_of_any_size_is_the_fixed_model(checkpoints):
    (_, path), (_, hybrid_path) = checkpoints
    for kw, weights, size in ((PLAIN_KW, path, (16, 16)), (HYBRID_KW, hybrid_path, (32, 32))):
        model = keras_vit.from_weights(**kw, weights=weights, input_shape=ANY_SIZE)
        fixed = keras_vit.from_weights(**kw, weights=weights)
        assert fixed.image_size == model.image_size == size
        x = _images(4, size)
        np.testing.assert_array_equal(model(x), fixed(x))  # no resize: the same operations


def test_hybrid_at_any_size_equals_a_model_built_at_that_size(checkpoints, jit_compile):
    _, (params, path) = checkpoints
    model = keras_vit.from_weights(**HYBRID_KW, weights=path, input_shape=ANY_SIZE)
    size = ODD
    assert model.image_size == (32, 32) and model.token_grid(size) == (5, 4)
    x = _images(1, size)
    logits = _predict(model, x, jit_compile)
    built = keras_vit.from_weights(**HYBRID_KW, weights=path, image_size=size)
    assert built.grid_size == (5, 4)
    np.testing.assert_allclose(logits, built(x), atol=ATOL, rtol=0)
    expected = hybrid_forward(params, x, num_layers=(), vit_layers=2)
    np.testing.assert_allclose(logits, expected, atol=HYBRID_ATOL, rtol=0)


def test_gap_feature_map_and_blocks_at_any_size(tmp_path):
    """A 'gap' model (no class token), headless with pooling=None, and the feature
    extractor of a model of any size: the maps of a model built at the size."""
    params = random_params(**PLAIN, grid=(4, 4), num_classes=2, classifier="gap", seed=23)
    path = str(tmp_path / "gap.npz")
    np.savez(path, **params)
    kw = dict(PLAIN_KW, classifier="gap", weights=path, include_top=False, pooling=None)
    model = keras_vit.from_weights(**kw, input_shape=ANY_SIZE)
    assert model.output.shape == (None, None, None, 32)
    features = model.feature_extractor(blocks=(1, 2), norm=True)
    x = _images(3, TALL)
    built = keras_vit.from_weights(**kw, image_size=TALL)
    got, want = model(x), built(x)
    assert got.shape == (2, 6, 3, 32)
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    maps, built_maps = features(x), built.feature_extractor(blocks=(1, 2), norm=True)(x)
    for key in ("block1", "block2"):
        np.testing.assert_allclose(maps[key], built_maps[key], atol=ATOL, rtol=0, err_msg=key)
    np.testing.assert_allclose(maps["block2"], got, atol=ATOL, rtol=0)


def test_a_fixed_size_model_keeps_its_graph():
    """No patch map and no resize in a fixed-size model: the encoder sees the tokens."""
    model = keras_vit.VisionTransformer(**PLAIN_KW, image_size=16)
    assert not model.dynamic_size and "input_shape" not in model.get_config()
    assert model.get_layer("embedding").output.shape == (None, 16, 32)
    assert model.get_layer("Transformer").input.shape == (None, 17, 32)


def test_keras_file_of_a_model_of_any_size(checkpoints, tmp_path):
    (_, npz), _ = checkpoints
    model = keras_vit.from_weights(**PLAIN_KW, weights=npz, input_shape=ANY_SIZE)
    path = str(tmp_path / "any.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, keras_vit.VisionTransformer) and loaded.dynamic_size
    assert loaded.get_config() == model.get_config()
    assert loaded.get_config()["input_shape"] == [None, None, 3]
    for seed, size in enumerate((TALL, WIDE)):
        x = _images(seed, size)
        np.testing.assert_array_equal(loaded(x), model(x))
    # ... and as the weights of a model built at a size: the same logits.
    size = WIDE
    fixed = keras_vit.from_weights(**PLAIN_KW, weights=path, image_size=size)
    x = _images(5, size)
    np.testing.assert_allclose(fixed(x), model(x), atol=ATOL, rtol=0)


def test_attention_and_inspection_of_a_model_of_any_size(checkpoints):
    """`attention_model` and the inspection functions on images of a size the model was
    not built at: the weights of a model built at that size; the grid is the images'."""
    (_, path), _ = checkpoints
    model = keras_vit.from_weights(**PLAIN_KW, weights=path, input_shape=ANY_SIZE)
    size, grid = TALL, (6, 3)
    built = keras_vit.from_weights(**PLAIN_KW, weights=path, image_size=size)
    x = _images(7, size)
    weights = [keras.ops.convert_to_numpy(w) for w in model.attention_model()(x)]
    expected = [keras.ops.convert_to_numpy(w) for w in built.attention_model()(x)]
    assert [w.shape for w in weights] == [(2, 2, 19, 19)] * 2  # 1 + 6x3 tokens
    for got, want in zip(weights, expected):
        np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)
    maps = vit_inspect.attention_maps(model, x)
    assert maps.shape == (2, *grid)
    want_maps = vit_inspect.rollout_maps(vit_inspect.rollout(expected), grid, 1)
    np.testing.assert_allclose(maps, want_maps, atol=ATOL, rtol=0)
    assert vit_inspect.grid_cell_pixels(model, size) == (4.0, 4.0)
    np.testing.assert_allclose(
        vit_inspect.attention_distance(model, x),
        vit_inspect.mean_attention_distance(expected, grid, (4.0, 4.0), 1),
        rtol=1e-5,
    )


def test_bad_sizes_are_named():
    with pytest.raises(ValueError, match=r"give both height and width .* or neither"):
        keras_vit.VisionTransformer(**PLAIN_KW, input_shape=(None, 16, 3))
    model = keras_vit.VisionTransformer(**PLAIN_KW, input_shape=ANY_SIZE)
    with pytest.raises(ValueError, match="image size 18x16 is not a multiple of the patch size"):
        model(_images(0, (18, 16)))
    hybrid = keras_vit.VisionTransformer(**HYBRID_KW, input_shape=ANY_SIZE)
    with pytest.raises(ValueError, match="ResNet feature map of 5x8, not a multiple"):
        hybrid.token_grid((20, 32))


# -- JAX -------------------------------------------------------------------------------

_WORKER = """
import sys
import keras, numpy as np
import keras_vit
assert keras.backend.backend() == "jax", keras.backend.backend()
plain_path, hybrid_path, images, out = sys.argv[1:5]
images = np.load(images)
any_size = (None, None, 3)
plain = keras_vit.from_weights(weights=plain_path, input_shape=any_size, **{plain!r})
hybrid = keras_vit.from_weights(weights=hybrid_path, input_shape=any_size, **{hybrid!r})
features = plain.feature_extractor(blocks=(1, 2), norm=True)
results = {{}}
for key in images.files:
    model = plain if key.startswith("plain") else hybrid
    results[key] = model.predict(images[key], verbose=0)  # XLA: the JAX trainer jits
    if key == "plain_wide":
        for name, value in features.predict(images[key], verbose=0).items():
            results[key + "/" + name] = value
assert "tensorflow" not in sys.modules, "keras_vit imported TensorFlow under JAX"
np.savez(out, **results)
"""


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="compares JAX with the TensorFlow run"
)
def test_jax_backend_at_any_size(checkpoints, tmp_path):
    assert keras.backend.backend() == "tensorflow"
    (plain_params, plain_path), (hybrid_params, hybrid_path) = checkpoints
    images = {
        "plain_tall": _images(0, TALL),
        "plain_wide": _images(1, WIDE),
        "hybrid_odd": _images(2, ODD),
    }
    np.savez(tmp_path / "x.npz", **images)
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    worker = _WORKER.format(plain=PLAIN_KW, hybrid=HYBRID_KW)
    args = [plain_path, hybrid_path, str(tmp_path / "x.npz"), str(tmp_path / "jax.npz")]
    result = subprocess.run(
        [sys.executable, "-c", worker, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    jax_out = np.load(tmp_path / "jax.npz")

    plain = keras_vit.from_weights(**PLAIN_KW, weights=plain_path, input_shape=ANY_SIZE)
    features = plain.feature_extractor(blocks=(1, 2), norm=True)
    hybrid = keras_vit.from_weights(**HYBRID_KW, weights=hybrid_path, input_shape=ANY_SIZE)
    for key, x in images.items():
        if key.startswith("plain"):
            expected, atol, model = vit_forward(plain_params, x, num_layers=2), ATOL, plain
        else:
            expected = hybrid_forward(hybrid_params, x, num_layers=(), vit_layers=2)
            atol, model = HYBRID_ATOL, hybrid
        np.testing.assert_allclose(jax_out[key], expected, atol=atol, rtol=0, err_msg=key)
        np.testing.assert_allclose(jax_out[key], model(x), atol=ATOL, rtol=0, err_msg=key)
    maps = features(images["plain_wide"])
    for name in ("block1", "block2"):
        np.testing.assert_allclose(jax_out[f"plain_wide/{name}"], maps[name], atol=ATOL, rtol=0)
