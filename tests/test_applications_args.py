"""keras.applications' arguments on VisionTransformer and the builders: its own
conformance checks (keras/src/applications/applications_test.py) restated for ViT
on a small model, plus what ViT adds (the patch-token map, the class token,
contradictions, RGB weights into other channel counts). Runs on the current
backend; `KERAS_BACKEND=jax pytest tests/test_applications_args.py` for JAX."""

import keras
import numpy as np
import pytest
from numpy_resnet import random_hybrid_params
from numpy_vit import random_params, vit_forward

import keras_vit
from keras_vit.checkpoint import CheckpointError
from keras_vit.checkpoint.loader import adapt_input_channels

SMALL = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)
SMALL_NP = dict(patch=8, hidden=16, mlp=32, heads=2, layers=2)


def small(**kwargs):
    """A small ViT, 32x32 unless the arguments give the resolution."""
    if not {"image_size", "input_shape", "input_tensor"} & set(kwargs):
        kwargs["image_size"] = 32
    return keras_vit.VisionTransformer(**{**SMALL, "num_classes": 5, **kwargs})


def _randomise(model, rng):
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.3)
    return model


def _run(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def _images(rng, batch, height, width, channels=3):
    return rng.uniform(-1, 1, (batch, height, width, channels)).astype("float32")


def _encoder_tokens(model, x):
    """The encoder's output (after the final LayerNorm), class token first."""
    encoder = model.get_layer("Transformer")
    return keras.ops.convert_to_numpy(encoder(model.tokens(x), training=False))


# -- input_shape -------------------------------------------------------------------


def test_notop_custom_input_shape():
    model = small(include_top=False, input_shape=(40, 24, 3))
    assert model.input.shape == (None, 40, 24, 3)
    assert model.image_size == (40, 24) and model.grid_size == (5, 3)
    assert model.output.shape == (None, 16)
    with keras.StatelessScope(initialize_variables=False):  # shapes only
        ti = keras_vit.ViT_Ti16(include_top=False, input_shape=(160, 160, 3))
        assert ti.input.shape == (None, 160, 160, 3) and ti.output.shape == (None, 192)
        assert ti.get_layer("Transformer").position_embedding.num_tokens == 1 + 10 * 10


def test_input_shape_against_image_size():
    assert small(image_size=(40, 24), input_shape=(40, 24, 3)).image_size == (40, 24)
    with pytest.raises(ValueError, match=r"image_size=32 disagrees with input_shape=\(40, 24, 3\)"):
        small(image_size=32, input_shape=(40, 24, 3))
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        small(input_shape=(30, 32, 3))
    with pytest.raises(ValueError, match="give both height and width"):
        small(input_shape=(None, 32, 1))
    with pytest.raises(ValueError, match=r"channels=3 disagrees with input_shape=\(32, 32, 1\)"):
        small(input_shape=(32, 32, 1), channels=3)


@pytest.mark.parametrize("channels", [1, 4])
def test_notop_variable_input_channels(rng, channels):
    model = small(include_top=False, input_shape=(32, 32, channels))
    assert model.input.shape == (None, 32, 32, channels)
    assert model.output.shape == (None, 16)
    assert tuple(model.get_layer("embedding").kernel.shape) == (8, 8, channels, 16)
    assert model.get_config()["channels"] == channels
    out = _run(model, _images(rng, 2, 32, 32, channels))
    assert out.shape == (2, 16)
    # The attention API builds its own input with the model's channels.
    assert model.attention_weights(_images(rng, 1, 32, 32, channels))[0].shape == (1, 2, 17, 17)


def test_hybrid_stem_takes_the_channels():
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.R_Ti16(include_top=False, pooling=None, input_shape=(64, 64, 1))
        stem = model.get_layer("root")
        assert tuple(stem.conv_root.kernel.shape) == (7, 7, 1, 64)
        assert model.output.shape == (None, 2, 2, 192)


# -- input_tensor ------------------------------------------------------------------


def test_input_tensor_is_the_model_input(rng):
    images = keras.Input((32, 24, 3))
    model = small(input_tensor=images)
    assert model.inputs[0] is images and model.image_size == (32, 24)
    with pytest.raises(ValueError, match=r"input_shape=\(32, 32, 3\) disagrees with the shape"):
        small(input_tensor=images, input_shape=(32, 32, 3))
    with pytest.raises(ValueError, match="must be a Keras tensor"):
        small(input_tensor=np.zeros((1, 32, 32, 3), "float32"))
    # A tensor with layers before it: the model starts at its source input.
    raw = keras.Input((32, 32, 3))
    scaled = keras.layers.Rescaling(1 / 127.5, offset=-1.0)(raw)
    model = _randomise(small(input_tensor=scaled), rng)
    assert model.inputs[0] is raw
    plain = small(image_size=32)
    plain.set_weights(model.get_weights())
    x = rng.uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    np.testing.assert_allclose(_run(model, x), _run(plain, x / 127.5 - 1), atol=1e-5)
    with pytest.raises(NotImplementedError, match="layers before it"):
        model.get_config()


# -- pooling -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "pooling,shape",
    [(None, (None, 4, 4, 16)), ("token", (None, 16)), ("avg", (None, 16)), ("max", (None, 16))],
)
def test_pooling_shapes(pooling, shape):
    model = small(include_top=False, pooling=pooling, representation_size=8)
    assert model.output.shape == shape
    assert "pre_logits" not in [layer.name for layer in model.layers]
    # With the head, pooling does not apply (as in keras.applications).
    assert small(pooling=pooling).output.shape == (None, 5)


def test_pooling_values(rng):
    x = _images(rng, 2, 32, 32)
    base = _randomise(small(include_top=False, representation_size=8), rng)
    tokens = _encoder_tokens(base, x)  # (2, 17, 16), after the final LayerNorm
    expected = {
        None: tokens[:, 1:].reshape(2, 4, 4, 16),
        "token": tokens[:, 0],
        "avg": tokens[:, 1:].mean(axis=1),
        "max": tokens[:, 1:].max(axis=1),
    }
    for pooling, value in expected.items():
        model = small(include_top=False, pooling=pooling, representation_size=8)
        model.set_weights(
            [
                w
                for w, v in zip(base.get_weights(), base.weights)
                if not v.path.startswith("pre_logits")
            ]
        )
        np.testing.assert_allclose(_run(model, x), value, atol=1e-5, err_msg=str(pooling))
    # Not given: today's output, the representation through pre_logits.
    assert base.output.shape == (None, 8)
    pre = base.get_layer("pre_logits")
    np.testing.assert_allclose(
        _run(base, x), keras.ops.convert_to_numpy(pre(tokens[:, 0])), atol=1e-5
    )


def test_gap_model_avg_is_its_own_pooling(rng):
    x = _images(rng, 2, 32, 32)
    gap = _randomise(small(classifier="gap", include_top=False), rng)
    avg = small(classifier="gap", include_top=False, pooling="avg")
    avg.set_weights(gap.get_weights())
    np.testing.assert_allclose(_run(avg, x), _run(gap, x), atol=1e-6)
    assert small(classifier="gap", include_top=False, pooling=None).output.shape == (None, 4, 4, 16)
    with pytest.raises(ValueError, match="pooling='token': this model has no class token"):
        small(classifier="gap", include_top=False, pooling="token")
    with pytest.raises(ValueError, match="pooling must be one of"):
        small(include_top=False, pooling="mean")


# -- classifier_activation, classes ------------------------------------------------


def test_classifier_activation(rng):
    model = _randomise(small(classifier_activation="softmax"), rng)
    assert model.layers[-1].activation.__name__ == "softmax"
    x = _images(rng, 3, 32, 32)
    probs = _run(model, x)
    logits = keras.ops.convert_to_numpy(
        keras.Model(model.inputs[0], model.get_layer("head").output)(x)
    )
    expected = np.exp(logits - logits.max(-1, keepdims=True))
    np.testing.assert_allclose(probs, expected / expected.sum(-1, keepdims=True), atol=1e-6)
    assert small().layers[-1].name == "head"  # None: logits
    with pytest.raises(ValueError):
        small(classifier_activation="no_such_activation")
    mixed = small(image_size=16, classifier_activation="sigmoid", dtype="mixed_bfloat16")
    assert mixed.get_layer("predictions").compute_dtype == "float32"
    assert keras.backend.standardize_dtype(mixed.output.dtype) == "float32"


def test_classes_is_an_alias_of_num_classes():
    assert small(num_classes=None, classes=7).output.shape == (None, 7)
    assert small(num_classes=7, classes=7).num_classes == 7
    with pytest.raises(ValueError, match="num_classes=5 and classes=7 disagree"):
        small(classes=7)
    with keras.StatelessScope(initialize_variables=False):
        assert keras_vit.ViT_Ti16(classes=10).output.shape == (None, 10)


# -- unknown arguments -------------------------------------------------------------


def test_unknown_keyword_arguments_are_type_errors():
    with pytest.raises(TypeError, match="'no_such_argument'"):
        small(no_such_argument=1)
    with pytest.raises(TypeError, match="'input_shpe'"):
        keras_vit.ViT_Ti16(input_shpe=(32, 32, 3))
    with pytest.raises(TypeError, match="'poling'"):
        keras_vit.hybrid.HybridViT((), "Ti", poling="avg")
    with pytest.raises(TypeError, match="'clases'"):
        keras_vit.build_model("ViT_Ti16", clases=3)
    # What from_config and serialisation pass stays accepted.
    model = small(name="named", trainable=False, dtype="float32")
    assert model.name == "named" and not model.trainable


# -- serialisation -----------------------------------------------------------------

CASES = {
    "softmax_1_channel": dict(input_shape=(32, 24, 1), classifier_activation="softmax"),
    "map_4_channels": dict(input_shape=(16, 16, 4), include_top=False, pooling=None),
    "avg_gap": dict(classifier="gap", include_top=False, pooling="avg"),
    "token_pre_logits": dict(representation_size=8, include_top=False, pooling="token"),
    "not_given": dict(representation_size=8, include_top=False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_serialise_deserialise(tmp_path, rng, case):
    model = _randomise(small(**CASES[case]), rng)
    config = model.get_config()
    assert ("pooling" in config) == ("pooling" in CASES[case])
    again = keras_vit.VisionTransformer.from_config(config)
    assert again.get_config() == config
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(model))
    assert len(restored.weights) == len(model.weights)
    assert restored.get_config() == config
    path = str(tmp_path / "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path, safe_mode=True)
    assert isinstance(loaded, keras_vit.VisionTransformer)
    assert loaded.get_config() == config
    x = _images(rng, 2, *model.image_size, model.channels)
    np.testing.assert_array_equal(_run(loaded, x), _run(model, x))


# -- RGB weights into other channel counts -----------------------------------------


@pytest.fixture
def rgb_ckpt(tmp_path):
    params = random_params(**SMALL_NP, grid=(4, 4), num_classes=3, seed=4)
    path = tmp_path / "rgb.npz"
    np.savez(path, **params)
    return str(path), params


def test_grey_model_from_rgb_weights_matches_repeated_grey(rgb_ckpt, rng, caplog):
    path, params = rgb_ckpt
    rgb = keras_vit.from_weights(path, **SMALL)
    with caplog.at_level("INFO", logger="keras_vit"):
        grey = keras_vit.from_weights(path, **SMALL, input_shape=(32, 32, 1))
    adapted = [r.getMessage() for r in caplog.records if "adapted to" in r.getMessage()]
    assert len(adapted) == 1, adapted  # one log line says so
    assert (
        "'embedding/kernel' of " in adapted[0]
        and "adapted to 1 input channels (summed over RGB)" in adapted[0]
    )
    assert grey.channels == 1 and grey.num_classes == 3  # other defaults still follow
    x = _images(rng, 2, 32, 32, 1)
    np.testing.assert_allclose(_run(grey, x), _run(rgb, np.repeat(x, 3, axis=-1)), atol=1e-5)
    np.testing.assert_allclose(
        _run(grey, x), vit_forward(params, np.repeat(x, 3, -1), num_layers=2), atol=1e-5
    )


def test_rgb_weights_into_four_channels(rgb_ckpt, caplog):
    path, params = rgb_ckpt
    with caplog.at_level("INFO", logger="keras_vit"):
        model = keras_vit.from_weights(path, **SMALL, input_shape=(32, 32, 4))
    assert "adapted to 4 input channels (repeated and scaled by 3/4)" in caplog.text
    kernel = params["embedding/kernel"]
    expected = np.concatenate([kernel, kernel[:, :, :1]], axis=2) * 0.75
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.get_layer("embedding").kernel), expected, rtol=1e-6
    )
    np.testing.assert_allclose(
        adapt_input_channels(kernel, 6), np.concatenate([kernel, kernel], axis=2) * 0.5, rtol=1e-6
    )
    # C a multiple of 3: an input whose C channels all hold one image gets the RGB
    # response to it (other C: R, G, B repeated unevenly; 3/C keeps the scale).
    np.testing.assert_allclose(
        adapt_input_channels(kernel, 9).sum(axis=2), kernel.sum(axis=2), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(ValueError, match=r"needs an RGB kernel \(kh, kw, 3, out\), got shape"):
        adapt_input_channels(kernel[:, :, :2], 1)
    with pytest.raises(ValueError, match="channels must be a positive integer, got 0"):
        adapt_input_channels(kernel, 0)


def test_other_channel_checkpoints_are_refused(tmp_path):
    params = random_params(**SMALL_NP, grid=(4, 4), num_classes=3, channels=2, seed=5)
    path = tmp_path / "two.npz"
    np.savez(path, **params)
    # Not given, the channels follow the checkpoint; another count is refused.
    assert keras_vit.from_weights(str(path), **SMALL).channels == 2
    with pytest.raises(
        CheckpointError,
        match=r"first mismatched key 'embedding/kernel': "
        r"checkpoint shape \(8, 8, 2, 16\) vs model shape \(8, 8, 4, 16\)",
    ):
        keras_vit.from_weights(str(path), **SMALL, input_shape=(32, 32, 4))


def test_channels_follow_a_keras_file(tmp_path):
    grey = small(input_shape=(32, 32, 1), num_classes=3)
    path = str(tmp_path / "grey.keras")
    grey.save(path)
    assert keras_vit.from_weights(path, **SMALL).channels == 1


def test_hybrid_stem_from_rgb_weights(tmp_path, caplog):
    params = random_hybrid_params(
        resnet=(), patch=2, hidden=16, mlp=32, heads=2, layers=1, grid=(2, 2), num_classes=3, seed=6
    )
    path = tmp_path / "hybrid.npz"
    np.savez(path, **params)
    with caplog.at_level("INFO", logger="keras_vit"):
        model = keras_vit.from_weights(
            str(path),
            resnet=(),
            patch_size=2,
            hidden_size=16,
            mlp_dim=32,
            num_heads=2,
            num_layers=1,
            input_shape=(16, 16, 1),
        )
    assert "'conv_root/kernel'" in caplog.text
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model.get_layer("root").conv_root.kernel),
        params["conv_root/kernel"].sum(axis=2, keepdims=True),
        rtol=1e-6,
    )
