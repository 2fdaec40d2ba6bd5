"""VisionTransformer and the named builders."""

import inspect

import keras
import numpy as np
import pytest
from tiny_models import tiny_vit

import keras_vit
from keras_vit import options

# docs/design.md, "Variants": parameters with a 1000-class head at 224 px.
PARAMS = {
    "ViT_Ti16": 5_717_416,
    "ViT_S16": 22_050_664,
    "ViT_S32": 22_878_952,
    "ViT_B8": 86_576_872,
    "ViT_B16": 86_567_656,
    "ViT_B32": 88_224_232,
    "ViT_L16": 304_326_632,
    "ViT_L32": 306_535_400,
    "ViT_H14": 632_045_800,
}


@pytest.mark.parametrize("name", sorted(PARAMS))
def test_parameter_counts(name):
    # Shapes only: inside a stateless scope no variable is allocated.
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.build_model(name)
        assert model.count_params() == PARAMS[name]
        assert model.output.shape == (None, 1000)


def tiny(**kwargs):
    """tests/tiny_models.py's ViT on 32 px, 8 px patches (16 tokens), two blocks."""
    return tiny_vit(**{"image_size": 32, "patch_size": 8, "num_layers": 2, **kwargs})


def test_include_top_and_representation_shapes():
    assert tiny().output.shape == (None, 5)
    assert tiny(include_top=False).output.shape == (None, 16)
    assert tiny(include_top=False, representation_size=12).output.shape == (None, 12)
    gap = tiny(classifier="gap")
    assert "cls" not in [layer.name for layer in gap.layers]
    assert gap.get_layer("Transformer").position_embedding.num_tokens == 16


def test_non_square_image_and_bad_sizes():
    model = tiny(image_size=(16, 40))
    assert model.grid_size == (2, 5) and model.input.shape == (None, 16, 40, 3)
    with pytest.raises(ValueError, match="not a multiple of the patch size"):
        tiny(image_size=30)
    with pytest.raises(ValueError, match="classifier must be"):
        tiny(classifier="mean")
    # Wrong types are named, not split into digits or failing deep in Keras.
    for bad in (32.0, "32", (16, 16, 16), True):
        with pytest.raises(ValueError, match=r"image_size must be an int or \(height, width\)"):
            tiny(image_size=bad)
    with pytest.raises(ValueError, match="patch_size must be an int or"):
        tiny(patch_size=8.0)
    with pytest.raises(ValueError, match=r"num_classes \(or classes\) must be an int, got 'ten'"):
        tiny(num_classes=None, classes="ten")
    with pytest.raises(ValueError, match="must be at least 1, got 0"):
        tiny(num_classes=0)


def test_builders_take_keyword_arguments():
    with keras.StatelessScope(initialize_variables=False):  # the config is all it reads
        model = keras_vit.ViT_Ti16(
            image_size=32, num_classes=3, classifier="gap", representation_size=8, dropout_rate=0.1
        )
    config = model.get_config()
    assert config["patch_size"] == (16, 16) and config["hidden_size"] == 192
    assert config["num_classes"] == 3 and config["representation_size"] == 8
    assert model.name == "vit_ti16"
    with pytest.raises(ValueError, match="Unknown model 'ViT_X9'"):
        keras_vit.build_model("ViT_X9")
    with pytest.raises(TypeError, match="'num_clases'"):
        keras_vit.ViT_Ti16(num_clases=3)


def test_default_builder_call():
    with keras.StatelessScope(initialize_variables=False):
        model = keras_vit.ViT_B16()
        assert model.image_size == (224, 224) and model.num_classes == 1000


def test_attention_weights_api(rng):
    model = tiny()
    x = rng.uniform(-1, 1, (3, 32, 32, 3)).astype("float32")
    weights = model.attention_weights(x)
    assert len(weights) == 2
    for w in weights:
        assert w.shape == (3, 2, 17, 17)
        np.testing.assert_allclose(w.sum(-1), 1, atol=1e-5)
    # The attention model shares the weights: the first block's weights computed by hand.
    encoder = model.get_layer("Transformer")
    tokens = encoder.position_embedding(model.tokens(x))
    _, expected = encoder.blocks[0].attention(
        encoder.blocks[0].norm_1(tokens), return_attention_weights=True
    )
    np.testing.assert_allclose(weights[0], keras.ops.convert_to_numpy(expected), atol=1e-5)


def test_attention_weights_of_a_one_block_model_are_a_list_of_one():
    # Keras returns a one-output model's array itself, not a list of it.
    x = np.zeros((3, 32, 32, 3), "float32")
    weights = tiny(num_layers=1).attention_weights(x)
    assert len(weights) == 1 and weights[0].shape == (3, 2, 17, 17)


def test_encoder_returns_hidden_states_and_weights(rng):
    model = tiny()
    encoder = model.get_layer("Transformer")
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    tokens = model.tokens(x)
    out, weights, states = encoder(tokens, return_attention_weights=True, return_hidden_states=True)
    assert len(weights) == 2 and len(states) == 3
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(out), keras.ops.convert_to_numpy(encoder(tokens)), atol=1e-5
    )


def test_dropout_only_in_training(rng):
    model = tiny(dropout_rate=0.5, attention_dropout_rate=0.5)
    for w in model.weights:
        w.assign(rng.standard_normal(w.shape).astype("float32") * 0.1)
    x = rng.uniform(-1, 1, (2, 32, 32, 3)).astype("float32")
    a, b = model(x, training=False), model(x, training=False)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    c = model(x, training=True)
    assert not np.allclose(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(c))


def test_preprocess_input():
    x = np.array([[0, 127.5, 255]], dtype=np.float32)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(keras_vit.preprocess_input(x)), [[-1, 0, 1]]
    )
    u = np.array([0, 255], dtype=np.uint8)
    out = keras_vit.preprocess_input(u)
    assert keras.backend.standardize_dtype(out.dtype) == "float32"
    np.testing.assert_allclose(keras.ops.convert_to_numpy(out), [-1, 1])


def test_decode_predictions():
    preds = np.zeros((2, 1000), np.float32)
    preds[0, 1], preds[0, 0] = 0.9, 0.05
    preds[1, 999] = 1.0
    decoded = keras_vit.decode_predictions(preds, top=2)
    assert decoded[0][0][:2] == ("n01443537", "goldfish, Carassius auratus")
    assert decoded[0][1][0] == "n01440764" and decoded[0][0][2] == pytest.approx(0.9)
    assert decoded[1][0][0] == "n15075141"  # toilet tissue, the last class
    names = keras_vit.decode_predictions(
        np.array([[0.1, 0.7, 0.2]]), top=1, class_names=["a", "b", "c"]
    )
    assert names == [[("1", "b", pytest.approx(0.7))]]
    with pytest.raises(ValueError, match="21843 classes"):
        keras_vit.decode_predictions(np.zeros((1, 21843)))
    with pytest.raises(ValueError, match="2 class names for predictions with 3"):
        keras_vit.decode_predictions(np.zeros((1, 3)), class_names=["a", "b"])


def _forbid_file_access(monkeypatch):
    """Makes every way the checkpoint package reads weights, and Python's own
    file opening, raise: what builds under it touched no file and no network."""
    from keras_vit.checkpoint import keras_files, npz, registry, source

    def refuse(*args, **kwargs):
        raise AssertionError(f"file or network access: {args!r}")

    for module, name in [
        (source, "open_source"),
        (keras_files, "read_archive_config"),
        (keras_files, "read_weights"),
        (npz, "read_npz"),
        (registry, "fetch"),
        (keras.utils, "get_file"),
        (keras.saving, "load_model"),
        (np, "load"),
        (__import__("builtins"), "open"),
        (__import__("io"), "open"),
        (__import__("os.path").path, "exists"),
        (__import__("os.path").path, "isfile"),
    ]:
        monkeypatch.setattr(module, name, refuse)


def test_construction_without_weights_and_from_config_touch_no_file(monkeypatch):
    hybrid = keras_vit.VisionTransformer(
        image_size=32,
        resnet=(),
        patch_size=2,
        hidden_size=16,
        mlp_dim=32,
        num_heads=2,
        num_layers=1,
    )
    configs = [
        tiny(include_top=False, pooling="avg", input_shape=(32, 32, 1)).get_config(),
        tiny(classifier_activation="softmax", representation_size=8).get_config(),
        hybrid.get_config(),
    ]
    _forbid_file_access(monkeypatch)
    model = tiny(classifier="gap")
    assert model.output.shape == (None, 5)
    for config in configs:
        assert keras_vit.VisionTransformer.from_config(config).get_config() == config
    with keras.StatelessScope(initialize_variables=False):
        keras_vit.ViT_Ti16(include_top=False, input_shape=(64, 64, 3))
        keras_vit.build_model("R_Ti16", num_classes=3)


def test_weights_go_through_the_one_entry_point(monkeypatch, tmp_path):
    """Every way to load weights (from_weights, the builders, build_model,
    load_weights) opens them in keras_vit.checkpoint.source.open_source, once each,
    for the architecture asked for; the model class itself refuses weights=,
    naming the ways, before anything is read."""
    from keras_vit.checkpoint import source

    calls = []
    real = source.open_source

    def spy(weights, arch=None):
        calls.append((weights, arch["hidden_size"]))
        return real(weights, arch)

    monkeypatch.setattr(source, "open_source", spy)
    path = str(tmp_path / "tiny.keras")
    tiny().save(path)
    arch = dict(patch_size=8, hidden_size=16, mlp_dim=32, num_heads=2, num_layers=2)
    keras_vit.from_weights(path, **arch)
    keras_vit.ViT_Ti16(weights=path, **arch)
    keras_vit.build_model({"variant": "ViT_Ti16", **arch}, weights=path)
    keras_vit.load_weights(tiny(), path)
    assert calls == [(path, 16)] * 4
    with pytest.raises(
        TypeError,
        match=r"VisionTransformer\(weights=\.\.\.\) does not load weights: build and load "
        r"with keras_vit\.from_weights\(weights, \*\*arguments\)",
    ):
        tiny(weights=path)
    assert len(calls) == 4


def test_every_option_is_in_the_signature_the_docstring_and_the_config():
    """Each declared option (keras_vit/options.py) reaches the signature users and
    `help()` see, its docstring entry, and (where its record says) the config."""
    parameters = inspect.signature(keras_vit.VisionTransformer).parameters
    assert list(parameters) == [option.name for option in options.OPTIONS]
    positional = [
        name for name, p in parameters.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
    ]
    assert positional[:6] == [
        "image_size",
        "patch_size",
        "hidden_size",
        "mlp_dim",
        "num_heads",
        "num_layers",
    ]
    assert positional[-5:] == ["weights", "name", "dtype", "resnet", "stochastic_depth_rate"]
    for option in options.OPTIONS:
        assert f"\n        {option.name}: " in keras_vit.VisionTransformer.__doc__, option.name
    config = tiny(approximate_gelu=False).get_config()
    always = {o.name for o in options.OPTIONS if o.record == options.ALWAYS}
    assert always <= set(config) and "qk_norm" not in config
    assert not config["approximate_gelu"]
    with pytest.raises(TypeError, match=r"VisionTransformer\(\): too many positional"):
        keras_vit.VisionTransformer(*[None] * 18)


def test_patch_embedding_norm_qk_norm_and_no_final_norm_against_numpy(rng):
    """The three norms timm's plain ViT may add or leave out (patch_embedding_norm,
    qk_norm, final_norm=False), each on its own and together, against the NumPy
    reference (float64), random weights."""
    from numpy_vit import vit_forward

    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    cases = (
        dict(patch_embedding_norm=True),
        dict(qk_norm=True),
        dict(final_norm=False),
        dict(patch_embedding_norm=True, qk_norm=True, final_norm=False),
    )
    for case in cases:
        model = keras_vit.VisionTransformer(16, 4, 8, 16, 2, 2, num_classes=3, **case)
        for w in model.weights:
            w.assign(rng.standard_normal(w.shape).astype("float32") * 0.5)
        params = keras_vit.checkpoint.model_params(model)
        assert ("embedding/norm/scale" in params) == case.get("patch_embedding_norm", False)
        assert ("Transformer/encoder_norm/scale" in params) == case.get("final_norm", True)
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(model(x)),
            vit_forward(params, x, num_layers=2),
            atol=1e-5,
            err_msg=str(case),
        )
