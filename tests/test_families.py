"""The family options of `VisionTransformer` (keras_vit.families): LayerScale,
register tokens, position embeddings for the patches alone, MAP pooling, the
pre-norm, quick_gelu, no patch-embedding bias. The default arguments build the
model of before they existed (the authors' values given explicitly: bit for bit in
one process; the float64 reference and the recorded logits: within the fidelity
goal); each option is in the config, survives
a `.keras` round trip (safe_mode), and computes what its paper says (checked on
numpy here; against timm and transformers in tests/test_interop_families.py)."""

import os

import keras
import numpy as np
import pytest
from float_bounds import assert_within
from numpy_vit import vit_forward
from recorded import load_recorded
from test_fidelity import ATOL

import keras_vit
from keras_vit import inspect as vit_inspect
from keras_vit.checkpoint import model_params

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = dict(image_size=16, patch_size=4, hidden_size=8, mlp_dim=16, num_heads=2, num_layers=2)
OPTIONS = {
    "LayerScale and registers": dict(layer_scale_init=1e-5, num_registers=2),
    "registers, class token without position embedding": dict(
        num_registers=3, position_embedding_for_class_token=False
    ),
    "gap with registers": dict(classifier="gap", num_registers=2),
    "MAP head": dict(classifier="map"),
    "CLIP": dict(pre_norm=True, quick_gelu=True, patch_embedding_bias=False, fc_norm=True),
    "DeiT III": dict(position_embedding_for_class_token=False, layer_scale_init=1e-6),
}


def _random(model, seed=0):
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    return model


def _images(n=2, size=16, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, size, size, 3)).astype("float32")


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


# The authors' value of each family option, written here rather than read from
# keras_vit.families, so that a changed default shows.
AUTHORS = dict(
    approximate_gelu=True,
    layer_norm_epsilon=1e-6,
    fc_norm=False,
    layer_scale_init=None,
    num_registers=0,
    position_embedding_for_class_token=True,
    pre_norm=False,
    quick_gelu=False,
    patch_embedding_bias=True,
)


def test_default_model_is_the_model_of_before():
    """A default model has the weights (paths, shapes) recorded before the options
    existed (tests/fixtures/default_model.json); its logits are bit for bit those of
    the model built with the authors' values given explicitly (the same process, so
    the same kernels), within the fidelity goal of the float64 NumPy reference, and
    within twice that goal of the logits recorded then (each float32 evaluation,
    there and here, is within the goal of the exact logits)."""
    before = load_recorded(os.path.join(HERE, "fixtures", "default_model.json"))
    model = keras_vit.VisionTransformer(**TINY, num_classes=3)
    assert [[w.path, list(w.shape)] for w in model.weights] == before["paths"]
    for option, value in AUTHORS.items():
        assert getattr(model, option) == value, option
    rng = np.random.default_rng(0)
    model.set_weights([rng.normal(0, 0.5, w.shape).astype("float32") for w in model.get_weights()])
    x = rng.uniform(-1, 1, (2, 16, 16, 3)).astype("float32")
    logits = _numpy(model(x))
    explicit = keras_vit.VisionTransformer(**TINY, num_classes=3, **AUTHORS)
    explicit.set_weights(model.get_weights())
    np.testing.assert_array_equal(_numpy(explicit(x)), logits)
    reference = vit_forward(model_params(model), x, num_layers=TINY["num_layers"])
    assert_within(logits, reference, ATOL, "the float64 reference")
    for key in ("logits_tensorflow", "logits_jax"):  # recorded under each backend
        assert_within(logits, before[key], 2 * ATOL, key)
    config = model.get_config()
    for option in OPTIONS["CLIP"] | OPTIONS["LayerScale and registers"] | {"pre_norm": 0}:
        if option not in ("fc_norm", "classifier"):
            assert option not in config, option  # the authors' values are not written


@pytest.mark.parametrize("case", sorted(OPTIONS))
def test_option_round_trips_through_keras_file(case, tmp_path):
    model = _random(keras_vit.VisionTransformer(**TINY, num_classes=3, **OPTIONS[case]))
    for option, value in OPTIONS[case].items():
        assert getattr(model, option) == value, option
        assert model.get_config()[option] == value, option
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras", safe_mode=True)
    assert [w.path for w in again.weights] == [w.path for w in model.weights]
    x = _images()
    np.testing.assert_array_equal(_numpy(again(x)), _numpy(model(x)))


def test_registers_are_dropped_from_features_and_pooling():
    """The registers take part in attention, but the feature maps, 'avg' pooling
    and the class token's output are of the patches and the class token."""
    model = _random(keras_vit.VisionTransformer(**TINY, include_top=False, num_registers=2))
    x = _images()
    encoder = model.get_layer("Transformer")
    tokens = _numpy(keras.Model(model.inputs, encoder.output)(x))
    assert tokens.shape == (2, 1 + 2 + 16, 8)
    maps = vit_inspect.attention_maps(model, x)
    assert maps.shape == (2, 4, 4)
    np.testing.assert_allclose(maps.sum(axis=(1, 2)), 1.0, atol=1e-9)
    features = model.feature_extractor(blocks=(-1,), norm=True)(x)["block2"]
    np.testing.assert_allclose(_numpy(features).reshape(2, 16, 8), tokens[:, 3:], atol=1e-6)
    headless = keras_vit.VisionTransformer(
        **TINY, include_top=False, num_registers=2, pooling="avg"
    )
    headless.set_weights(model.get_weights())
    np.testing.assert_allclose(_numpy(headless(x)), tokens[:, 3:].mean(1), atol=1e-6)
    np.testing.assert_allclose(_numpy(model(x)), tokens[:, 0], atol=1e-6)


def test_layer_scale_and_patch_only_position_embedding_compute_their_definitions():
    """LayerScale 1 and the class token's position row 0 give the plain model."""
    plain = _random(keras_vit.VisionTransformer(**TINY, num_classes=3))
    scaled = keras_vit.VisionTransformer(
        **TINY, num_classes=3, layer_scale_init=1.0, position_embedding_for_class_token=False
    )
    params = model_params(plain)
    params["Transformer/posembed_input/pos_embedding"][:, 0] = 0.0
    keras_vit.checkpoint.assign_params(plain, params)
    scaled_params = {
        name: params.get(name, np.ones(shape, "float32"))
        for name, shape in keras_vit.checkpoint.loader.Target.of(scaled).shapes.items()
    }
    scaled_params["Transformer/posembed_input/pos_embedding"] = params[
        "Transformer/posembed_input/pos_embedding"
    ][:, 1:]
    keras_vit.checkpoint.assign_params(scaled, scaled_params)
    x = _images()
    np.testing.assert_allclose(_numpy(scaled(x)), _numpy(plain(x)), atol=1e-6)


def test_quick_gelu_is_clips():
    from keras_vit.layers.mlp import quick_gelu

    x = np.linspace(-4, 4, 17).astype("float32")
    np.testing.assert_allclose(_numpy(quick_gelu(x)), x / (1 + np.exp(-1.702 * x)), rtol=1e-6)


def test_map_head_is_big_visions():
    """MAP: a probe attends to the tokens (one query), then x + MLP(LN(x)); numpy."""
    model = _random(keras_vit.VisionTransformer(**TINY, include_top=False, classifier="map"))
    x = _images()
    tokens = _numpy(keras.Model(model.inputs, model.get_layer("Transformer").output)(x))
    p = {k[len("MAPHead_0/") :]: v for k, v in model_params(model).items() if "MAPHead" in k}

    def project(t, name):
        return np.einsum("btd,dhk->bthk", t, p[f"{name}/kernel"]) + p[f"{name}/bias"]

    attention = "MultiHeadDotProductAttention_0"
    q = project(np.broadcast_to(p["probe"], (2, 1, 8)), f"{attention}/query")
    k, v = project(tokens, f"{attention}/key"), project(tokens, f"{attention}/value")
    logits = np.einsum("bqhk,bthk->bhqt", q, k) / np.sqrt(4)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhqt,bthk->bqhk", weights, v)
    y = (
        np.einsum("bqhk,hkd->bqd", context, p[f"{attention}/out/kernel"])
        + p[f"{attention}/out/bias"]
    )
    mean, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    normed = (y - mean) / np.sqrt(var + 1e-6) * p["LayerNorm_0/scale"] + p["LayerNorm_0/bias"]
    hidden = normed @ p["MlpBlock_0/Dense_0/kernel"] + p["MlpBlock_0/Dense_0/bias"]
    hidden = 0.5 * hidden * (1 + np.tanh(np.sqrt(2 / np.pi) * (hidden + 0.044715 * hidden**3)))
    y = y + hidden @ p["MlpBlock_0/Dense_1/kernel"] + p["MlpBlock_0/Dense_1/bias"]
    np.testing.assert_allclose(_numpy(model(x)), y[:, 0], atol=1e-5)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(classifier="cls"), "classifier must be one of"),
        (dict(num_registers=-1), "num_registers must be"),
        (dict(layer_scale_init=0), "layer_scale_init must be"),
        (dict(pre_norm=1), "pre_norm must be True or False"),
        (dict(classifier="map", include_top=False, pooling="token"), "no class token"),
    ],
)
def test_invalid_options_are_named(arguments, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.VisionTransformer(**TINY, **arguments)


FAMILY_BUILDERS = {
    "DeiT3_S16": dict(position_embedding_for_class_token=False, layer_scale_init=1e-6),
    "DINOv2_S14_reg": dict(num_registers=4, layer_scale_init=1e-5),
    "SigLIP_B16": dict(classifier="map"),
    "CLIP_B16": dict(pre_norm=True, quick_gelu=True, patch_embedding_bias=False),
    "DINOv3_S16": dict(
        num_registers=4,
        absolute_position_embedding=False,
        classifier="token_gap",
        layer_norm_epsilon=1e-5,
    ),
    "EVA02_B14": dict(gated_mlp=True, mlp_norm=True, fc_norm=True, classifier="token_gap"),
    "RoPE_Mixed_ViT_S16": dict(absolute_position_embedding=False, layer_scale_init=1e-5),
}


@pytest.mark.parametrize("name", sorted(FAMILY_BUILDERS))
def test_family_builders_carry_their_options(name):
    """Each family's builder (tiny here: its sizes overridden) builds its options;
    BUILDERS and build_model know it."""
    small = dict(hidden_size=8, mlp_dim=16, num_heads=2, num_layers=1, image_size=112)
    model = keras_vit.BUILDERS[name](**small, num_classes=3)
    assert model.name == name.lower()
    for option, value in FAMILY_BUILDERS[name].items():
        assert getattr(model, option) == value, option
    assert keras_vit.build_model(name, **small).patch_size == model.patch_size
