"""`VisionTransformer.feature_extractor`: the token maps of chosen encoder blocks and a
hybrid's ResNet stages from one call, as a Keras model sharing the ViT's weights: the
values the model computes, the NumPy reference's, inside a user's functional graph (a
ViTDet-style simple feature pyramid: trained, saved, loaded), and clear errors."""

import keras
import numpy as np
import pytest
from numpy_resnet import random_hybrid_params, resnet_forward
from numpy_vit import encoder_block, layer_norm, patch_embed, random_params

import keras_vit

# float32 Keras vs float64 NumPy: the model-level goal for outputs after a LayerNorm,
# fixed (docs/testing.md); the hybrids' bar for the ResNet's feature maps.
ATOL = 1e-5
HYBRID_ATOL = 1e-4

# 3 blocks, 12x16 px with 4x4 patches: a non-square 3x4 grid (rows/cols mix-ups show).
SMALL = dict(patch=4, hidden=32, mlp=64, heads=2, layers=3)
SMALL_KW = dict(patch_size=4, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=3)
IMAGE = (12, 16)
GRID = (3, 4)


def _images(seed, size=IMAGE, batch=2):
    return np.random.default_rng(seed).uniform(-1, 1, (batch, *size, 3)).astype(np.float32)


def _numpy(tensors):
    return {key: keras.ops.convert_to_numpy(value) for key, value in tensors.items()}


def _checkpoint(tmp_path, classifier="token", seed=0):
    """Random official-layout parameters of a 3x4 grid (a .npz says no grid: models
    built on it give image_size=IMAGE), and their file."""
    params = random_params(**SMALL, grid=GRID, num_classes=4, classifier=classifier, seed=seed)
    path = str(tmp_path / f"{classifier}.npz")
    np.savez(path, **params)
    return params, path


def numpy_block_maps(params, images, blocks, classifier="token"):
    """An independent computation (tests/numpy_vit.py): the tokens after each encoder
    block of `blocks` (1-based), through the final LayerNorm, class token dropped, laid
    on the grid: {f"block{k}": (B, rows, cols, hidden)}."""
    p = {k: np.asarray(v, np.float64) for k, v in params.items()}
    x = patch_embed(np.asarray(images, np.float64), p["embedding/kernel"], p["embedding/bias"])
    kh, kw = p["embedding/kernel"].shape[:2]
    rows, cols = images.shape[1] // kh, images.shape[2] // kw
    prefix = 1 if classifier == "token" else 0
    if prefix:
        x = np.concatenate([np.broadcast_to(p["cls"], (len(x), 1, x.shape[-1])), x], axis=1)
    x = x + p["Transformer/posembed_input/pos_embedding"]
    maps = {}
    for i in range(max(blocks)):
        x = encoder_block(x, p, i)
        if i + 1 in blocks:
            y = layer_norm(
                x, p["Transformer/encoder_norm/scale"], p["Transformer/encoder_norm/bias"]
            )
            maps[f"block{i + 1}"] = y[:, prefix:].reshape(len(x), rows, cols, -1)
    return maps


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_block_maps_are_what_the_model_computes(tmp_path, classifier):
    _, path = _checkpoint(tmp_path, classifier)
    kw = dict(SMALL_KW, classifier=classifier, image_size=IMAGE, weights=path)
    model = keras_vit.from_weights(**kw)
    features = model.feature_extractor(blocks=(1, -1, 3))  # -1 is block 3: once
    assert features.name == "vit_features"
    assert list(features.output) == ["block1", "block3"]
    assert all(t.shape == (None, *GRID, 32) for t in features.output.values())
    x = _images(1)
    maps = _numpy(features(x))
    # The encoder's own hidden states (after block k, before the final LayerNorm).
    encoder = model.get_layer("Transformer")
    _, hidden = encoder(model.tokens(x), return_hidden_states=True)
    prefix = encoder.num_prefix_tokens
    for k in (1, 3):
        want = keras.ops.convert_to_numpy(hidden[k])[:, prefix:].reshape(2, *GRID, 32)
        np.testing.assert_array_equal(maps[f"block{k}"], want)
    # Through the final LayerNorm, the last block's map is the pooling=None output.
    headless = keras_vit.from_weights(**kw, include_top=False, pooling=None)
    last = model.feature_extractor(norm=True)  # blocks=(-1,): the last
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(last(x)["block3"]), keras.ops.convert_to_numpy(headless(x))
    )


def test_normalised_block_maps_match_numpy(tmp_path):
    params, path = _checkpoint(tmp_path, seed=2)
    model = keras_vit.from_weights(**SMALL_KW, image_size=IMAGE, weights=path)
    x = _images(2)
    maps = _numpy(model.feature_extractor(blocks=(1, 2, 3), norm=True)(x))
    expected = numpy_block_maps(params, x, (1, 2, 3))
    assert list(maps) == list(expected)
    for key, want in expected.items():
        np.testing.assert_allclose(maps[key], want, atol=ATOL, rtol=0, err_msg=key)


def test_hybrid_stages_and_blocks_from_one_call(tmp_path):
    """A hybrid's ResNet outputs come from the same call as the blocks; the old
    `keras_vit.hybrid.feature_extractor` is an alias of it."""
    params = random_hybrid_params(
        resnet=(1,), patch=2, hidden=32, mlp=64, heads=2, layers=2, grid=(4, 4), num_classes=3
    )
    path = str(tmp_path / "hybrid.npz")
    np.savez(path, **params)
    kw = dict(resnet=(1,), patch_size=2, hidden_size=32, mlp_dim=64, num_heads=2, num_layers=2)
    model = keras_vit.from_weights(**kw, weights=path)
    assert model.image_size == (32, 32)  # grid 4 x patch 2 x the stem's stride 4
    features = model.feature_extractor(blocks=(-1,), stages=True, norm=True)
    x = _images(3, (32, 32))
    maps = _numpy(features(x))
    assert {key: value.shape for key, value in maps.items()} == {
        "stem": (2, 8, 8, 64),
        "stage1": (2, 8, 8, 256),
        "block2": (2, 4, 4, 32),
    }
    stem, stage1 = resnet_forward(params, x, (1,), return_stages=True)
    np.testing.assert_allclose(maps["stem"], stem, atol=HYBRID_ATOL, rtol=0)
    np.testing.assert_allclose(maps["stage1"], stage1, atol=HYBRID_ATOL, rtol=0)
    headless = keras_vit.from_weights(**kw, weights=path, include_top=False, pooling=None)
    np.testing.assert_array_equal(maps["block2"], keras.ops.convert_to_numpy(headless(x)))
    assert list(model.feature_extractor(blocks=(), stages=(0, -1)).output) == ["stem", "stage1"]
    # The alias: the same maps in its own forms (a list; the last map alone).
    alias = keras_vit.hybrid.feature_extractor(model, stages=True)
    for got, key in zip(alias(x), ("stem", "stage1")):
        np.testing.assert_array_equal(got, maps[key])
    np.testing.assert_array_equal(keras_vit.hybrid.feature_extractor(model)(x), maps["stage1"])


def simple_feature_pyramid(feature_map, channels):
    """ViTDet's simple feature pyramid (Li et al., 2022) on one stride-s map, as
    docs/features.md builds it: strides s/4 and s/2 from transposed convolutions, s, and
    2s from a max-pool; each level a 1x1 then a 3x3 convolution, each with LayerNorm."""

    def level(x, name):
        for kernel, part in ((1, "lateral"), (3, "output")):
            x = keras.layers.Conv2D(channels, kernel, padding="same", name=f"{name}_{part}")(x)
            x = keras.layers.LayerNormalization(name=f"{name}_{part}_norm")(x)
        return x

    width = feature_map.shape[-1]
    x = keras.layers.Conv2DTranspose(width // 2, 2, strides=2, name="p2_deconv1")(feature_map)
    x = keras.layers.LayerNormalization(name="p2_deconv1_norm")(x)
    x = keras.layers.Activation("gelu", name="p2_gelu")(x)
    p2 = keras.layers.Conv2DTranspose(width // 4, 2, strides=2, name="p2_deconv2")(x)
    p3 = keras.layers.Conv2DTranspose(width // 2, 2, strides=2, name="p3_deconv")(feature_map)
    p5 = keras.layers.MaxPooling2D(2, name="p5_pool")(feature_map)
    levels = {"p2": p2, "p3": p3, "p4": feature_map, "p5": p5}
    return {key: level(x, key) for key, x in levels.items()}


def test_inside_a_functional_graph_trained_and_saved(tmp_path):
    """A model of any size: its extractor called like a layer in a user's graph (a
    feature pyramid and a head), one training step reaching the ViT's weights, and a
    `.keras` round trip (safe mode) giving the same outputs."""
    kw = dict(SMALL_KW, num_layers=1)  # one block: the graph is what is tested here
    vit = keras_vit.VisionTransformer(**kw, input_shape=(None, None, 3), include_top=False)
    features = vit.feature_extractor()  # the last block
    images = keras.Input((None, None, 3), name="images")
    pyramid = simple_feature_pyramid(features(images)["block1"], channels=8)
    pooled = [keras.layers.GlobalAveragePooling2D(name=f"{k}_mean")(v) for k, v in pyramid.items()]
    score = keras.layers.Dense(1, name="score")(keras.layers.Concatenate(name="levels")(pooled))
    detector = keras.Model(images, {**pyramid, "score": score}, name="detector")

    x = _images(4, (16, 24))  # a 4x6 grid at stride 4: levels 16x24, 8x12, 4x6, 2x3
    shapes = {key: tuple(value.shape) for key, value in detector(x).items()}
    assert shapes == {
        "p2": (2, 16, 24, 8),
        "p3": (2, 8, 12, 8),
        "p4": (2, 4, 6, 8),
        "p5": (2, 2, 3, 8),
        "score": (2, 1),
    }
    kernel = vit.get_layer("embedding").kernel
    before = keras.ops.convert_to_numpy(kernel).copy()
    trained = keras.Model(images, score)
    trained.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile=False)
    trained.train_on_batch(x, np.ones((2, 1), np.float32))
    assert not np.array_equal(keras.ops.convert_to_numpy(kernel), before)

    path = str(tmp_path / "detector.keras")
    detector.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    for size in ((16, 24), (20, 12)):
        x = _images(5, size)
        want = _numpy(detector(x))
        for key, got in _numpy(loaded(x)).items():
            np.testing.assert_array_equal(got, want[key], err_msg=f"{key} at {size}")


def test_bad_requests_name_the_problem():
    model = keras_vit.VisionTransformer(**SMALL_KW, image_size=IMAGE)
    for blocks in ((0,), (4,), (-4,)):
        with pytest.raises(
            ValueError, match=r"block .* is out of range: this model has blocks 1\.\.3"
        ):
            model.feature_extractor(blocks=blocks)
    with pytest.raises(ValueError, match=r"blocks must be ints, got '3'"):
        model.feature_extractor(blocks=("3",))
    with pytest.raises(ValueError, match="not a hybrid: it has no ResNet"):
        model.feature_extractor(stages=True)
    with pytest.raises(ValueError, match="no map asked for"):
        model.feature_extractor(blocks=())
    with pytest.raises(ValueError, match="not a hybrid"):
        keras_vit.hybrid.feature_extractor(model)
    hybrid = keras_vit.VisionTransformer(
        resnet=(), patch_size=2, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=1
    )
    with pytest.raises(ValueError, match=r"stage 1 is out of range: this model has stages 0\.\.0"):
        hybrid.feature_extractor(stages=(1,))


def test_views_in_either_order_share_the_weights():
    """feature_extractor() before attention_model() (once: 'Output with path 0 is not
    connected'), and the features the same as the other order's."""
    images = np.random.default_rng(0).uniform(-1, 1, (2, 28, 28, 3)).astype("float32")
    maps = {}
    for first in ("features", "attention"):
        keras.utils.set_random_seed(0)
        model = keras_vit.VisionTransformer(
            image_size=28,
            patch_size=7,
            hidden_size=16,
            mlp_dim=32,
            num_heads=2,
            num_layers=2,
            classes=4,
        )
        if first == "attention":
            model.attention_model()
        features = model.feature_extractor(blocks=(1, 2))
        weights = model.attention_weights(images)
        assert [w.shape for w in weights] == [(2, 2, 17, 17)] * 2
        np.testing.assert_allclose(np.sum(weights[1], -1), 1.0, rtol=1e-5)
        maps[first] = features.predict(images, verbose=0)
    for key in ("block1", "block2"):
        np.testing.assert_array_equal(maps["features"][key], maps["attention"][key])
