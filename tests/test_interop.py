"""timm and transformers checkpoints without torch: the committed fixtures
(tests/fixtures/make_interop_fixtures.py: tiny models saved by timm and
transformers themselves, with their own outputs) read through `weights=`, the
family options kept by a .keras round trip, written back, and bad inputs refused
by name before any weight is assigned. tests/test_interop_torch.py compares with
timm's and transformers' forward directly (the torch stage)."""

import json
import os
import shutil
import sys

import keras
import numpy as np
import pytest
import scipy
from fixtures.make_interop_fixtures import IMAGES_SEED
from float_bounds import assert_within
from interop_testing import (
    FAMILY_FIXTURES,
    FIXTURE_SIZES,
    FIXTURES,
    TIMM_FAMILIES,
    TRANSFORMERS_FAMILIES,
    images,
)
from recorded import load_recorded
from test_convert_checkpoint import tool  # noqa: F401  (the tool's module, as a fixture)

import keras_vit
from keras_vit.checkpoint import CheckpointError, interop, state_dict
from keras_vit.checkpoint.refused import RefusedFeatureError
from keras_vit.families import FAMILY_OPTIONS
from keras_vit.layers import Encoder

REFERENCE = os.path.join(FIXTURES, "reference.npz")
# fixture -> (weights= value, from_weights arguments beyond the sizes, the family options)
CASES = {
    "timm_token": ("timm_token", {}, dict(approximate_gelu=False, fc_norm=False)),
    "timm_gap_fc_norm": (  # a bare file: the GELU's form is no shape's (test_sizes_*)
        "timm_gap_fc_norm.safetensors",
        {"approximate_gelu": False},
        dict(approximate_gelu=False, fc_norm=True, classifier="gap"),
    ),
    "transformers_classifier": (
        "transformers_classifier",
        {},
        dict(approximate_gelu=False, layer_norm_epsilon=1e-12),
    ),
    "transformers_model": (
        "transformers_model",
        {"include_top": False},
        dict(approximate_gelu=False, layer_norm_epsilon=1e-12),
    ),
}
# The families: timm's with their heads, transformers' towers headless (their pooled or
# projected features); the options each file gives (tests/interop_testing.py's tables).
CASES.update(
    {
        f"timm_{name}": (f"timm_{name}", {}, TIMM_FAMILIES[name][2])
        for name in FAMILY_FIXTURES["timm"]
    }
)
CASES.update(
    {
        f"transformers_{name}": (
            f"transformers_{name}",
            {"include_top": False},
            TRANSFORMERS_FAMILIES[name][2],
        )
        for name in FAMILY_FIXTURES["transformers"]
    }
)
# float32 sums of a few dozen products of O(1) numbers, two implementations: their
# rounding differs by a few ulps of the outputs' O(1) scale.
TOLERANCE = 1e-5


def _fixture(name):
    return os.path.join(FIXTURES, CASES[name][0])


def _load(name, **overrides):
    _, arguments, _ = CASES[name]
    return keras_vit.from_weights(_fixture(name), **FIXTURE_SIZES, **arguments, **overrides)


@pytest.fixture(scope="module")
def reference():
    """The recorded outputs, each moved by one ulp (tests/recorded.py: compared within
    TOLERANCE, never bit for bit), and the images they were computed on, drawn again
    here as the fixture script drew them (within that ulp of the recorded ones)."""
    recorded = load_recorded(REFERENCE)
    x = images(2, FIXTURE_SIZES["image_size"], FIXTURE_SIZES["image_size"], seed=IMAGES_SEED)
    assert_within(x, recorded["images"], np.spacing(np.abs(x)), "the fixture's images")
    return {**recorded, "images": x}


@pytest.mark.parametrize("name", sorted(CASES))
def test_fixture_outputs_equal_the_source(name, reference):
    """Each fixture through `weights=` gives its source's own outputs (logits, or
    transformers' pooler output for ViTModel: keras_vit's pre_logits), and the
    model carries the family's options."""
    model = _load(name)
    for option, value in CASES[name][2].items():
        assert getattr(model, option) == value, option
    outputs = keras.ops.convert_to_numpy(model(reference["images"]))
    assert outputs.shape == reference[name].shape
    np.testing.assert_allclose(outputs, reference[name], atol=TOLERANCE, rtol=0)


def test_keras_round_trip_keeps_the_family_options(tmp_path, reference):
    """The options are in the model config: a .keras file rebuilds the same model."""
    model = _load("timm_gap_fc_norm")
    model.save(tmp_path / "m.keras")
    again = keras.saving.load_model(tmp_path / "m.keras")
    config = again.get_config()
    assert (config["approximate_gelu"], config["fc_norm"]) == (False, True)
    assert config["layer_norm_epsilon"] == model.layer_norm_epsilon
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(again(reference["images"])),
        keras.ops.convert_to_numpy(model(reference["images"])),
    )


@pytest.mark.parametrize(
    "name, save",
    [
        ("timm_token", "save_timm"),
        ("timm_gap_fc_norm", "save_timm"),
        ("transformers_classifier", "save_transformers"),
        ("transformers_model", "save_transformers"),
        # the families, written for timm, and the transformers towers as their classes
        *((f"timm_{name}", "save_timm") for name in FAMILY_FIXTURES["timm"]),
        *(
            (f"transformers_{name}", "save_transformers")
            for name in FAMILY_FIXTURES["transformers"]
        ),
        *(
            (f"transformers_{name}", "save_timm")
            for name in FAMILY_FIXTURES["transformers"]
            if name != "Dinov2WithRegistersModel"  # its class token's position: below
        ),
    ],
)
def test_written_back_and_read_again_bitwise(name, save, tmp_path):
    """keras_vit -> the family's layout -> keras_vit: every array bitwise, the
    same options (timm's and transformers' own forward on the written files:
    tests/test_interop_torch.py)."""
    model = _load(name)
    getattr(keras_vit.checkpoint, save)(model, tmp_path / "out")
    again = keras_vit.from_weights(str(tmp_path / "out"), **FIXTURE_SIZES, **CASES[name][1])
    params, again_params = (keras_vit.checkpoint.model_params(m) for m in (model, again))
    assert list(again_params) == list(params)
    for key, value in params.items():
        np.testing.assert_array_equal(again_params[key], value, err_msg=key)
    for option in FAMILY_OPTIONS + ("classifier", "representation_size"):
        assert getattr(again, option) == getattr(model, option), option


def test_what_no_transformers_class_computes_is_refused_naming_the_options(tmp_path):
    """SigLIP's tower with LayerScale and QuickGELU: no transformers class has them; the
    error names each option and points to save_timm, and writes nothing."""
    model = keras_vit.VisionTransformer(
        **FIXTURE_SIZES, classifier="map", layer_scale_init=0.1, quick_gelu=True, include_top=False
    )
    with pytest.raises(CheckpointError) as raised:
        keras_vit.checkpoint.save_transformers(model, tmp_path / "out")
    message = str(raised.value)
    assert "layer_scale_init=0.1" in message and "quick_gelu=True" in message
    assert "num_registers" not in message and "save_timm" in message
    assert not (tmp_path / "out").exists()


def test_registers_with_a_class_token_position_are_written_for_timm_folded(tmp_path, reference):
    """transformers' DINOv2 with registers gives its class token a position embedding;
    timm's layout for registers has none (no_embed_class): save_timm adds that row to
    the class token, the same function (outputs bitwise equal), read back as timm's."""
    model = _load("transformers_Dinov2WithRegistersModel")
    keras_vit.checkpoint.save_timm(model, tmp_path / "out")
    again = keras_vit.from_weights(str(tmp_path / "out"), **FIXTURE_SIZES)
    assert not again.include_top  # a folder without a head builds headless
    assert model.position_embedding_for_class_token and not again.position_embedding_for_class_token
    params, again_params = (keras_vit.checkpoint.model_params(m) for m in (model, again))
    position = params["Transformer/posembed_input/pos_embedding"]
    np.testing.assert_array_equal(again_params["cls"], params["cls"] + position[:, :1])
    np.testing.assert_array_equal(
        again_params["Transformer/posembed_input/pos_embedding"], position[:, 1:]
    )
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(again(reference["images"])),
        keras.ops.convert_to_numpy(model(reference["images"])),
    )


@pytest.mark.parametrize("name", ["timm_token", "transformers_classifier", "transformers_model"])
def test_source_records_the_whole_model(name, reference):
    """A Hub directory whose config.json records every size opens to a Source with
    the model's whole config (as a run directory's): built from it alone, then
    loaded, it gives the source's outputs (trainers' --init builds from it)."""
    opened = keras_vit.checkpoint.open_source(_fixture(name))
    model = keras_vit.build_model(opened.config)
    keras_vit.checkpoint.load(model, opened)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(reference["images"])),
        reference[name],
        atol=TOLERANCE,
        rtol=0,
    )


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModels are TensorFlow's")
def test_savedmodel_export_of_a_timm_file(tmp_path, reference):
    """The export of a timm GAP + fc_norm model (exact GELU, LayerNorm after pooling)
    serves the softmax of the source's logits for the same pixels (a softmax moves
    each output by at most what the logits move)."""
    import tensorflow as tf

    from keras_vit.preprocessing import PIXEL_SCALE
    from keras_vit_deploy import serving

    names = serving.export_saved_model(_load("timm_gap_fc_norm"), str(tmp_path / "sm"))
    served = tf.saved_model.load(str(tmp_path / "sm")).signatures[names[2]]
    pixels = (reference["images"] + 1.0) * PIXEL_SCALE  # the [0, 255] pixels of the images
    probabilities = served(images=tf.constant(pixels))["probabilities"].numpy()
    expected = scipy.special.softmax(reference["timm_gap_fc_norm"], axis=-1)
    np.testing.assert_allclose(probabilities, expected, atol=TOLERANCE, rtol=0)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
def test_finetune_init_from_a_transformers_folder(reference):
    """--init=HF_DIR: the trainer's model (config.model, another head) takes the
    folder's options (transformers' exact GELU and epsilon 1e-12, where
    config.model_overrides leaves them open) and every other array of the folder."""
    import types

    from keras_vit_trainers import train_lib

    config = types.SimpleNamespace(
        model=dict(FIXTURE_SIZES),
        model_overrides={},
        image_size=FIXTURE_SIZES["image_size"],
    )
    init = train_lib.open_init(_fixture("transformers_classifier"))
    fresh = train_lib.model_factory(config, init)(num_classes=5)
    train_lib.load_init(fresh, init)
    source = _load("transformers_classifier")
    headless = [keras.Model(m.input, m.get_layer("pool").output) for m in (fresh, source)]
    np.testing.assert_array_equal(
        *(keras.ops.convert_to_numpy(m(reference["images"])) for m in headless)
    )
    assert fresh.get_layer("head").kernel.shape == (FIXTURE_SIZES["hidden_size"], 5)


def test_loaded_into_a_model_of_other_options_says_so(caplog):
    """load_weights into a model built otherwise (the official tanh GELU) loads, and
    warns that its outputs are not the file's."""
    model = keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3)
    with caplog.at_level("WARNING", logger="keras_vit"):
        keras_vit.load_weights(model, _fixture("timm_token"))
    assert "approximate_gelu=False, the model has True" in caplog.text
    exact = _load("timm_token")
    for a, b in zip(model.get_weights(), exact.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_save_timm_as_a_file(tmp_path):
    """save_timm to a .safetensors path writes the state dict alone, which reads back."""
    model = _load("timm_token")
    path = keras_vit.checkpoint.save_timm(model, tmp_path / "vit.safetensors")
    assert os.listdir(tmp_path) == ["vit.safetensors"]
    _, family, meta, _, config = interop.open_file(path)
    assert config is None  # a bare state dict records no heads
    assert (family, meta["classifier"], meta["num_classes"]) == ("timm", "token", 3)


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(classifier="gap"), "classifier='gap'"),
        (dict(fc_norm=True), "fc_norm"),
        (dict(representation_size=4), "no pooler"),
    ],
)
def test_save_transformers_refuses_what_it_cannot_express(arguments, message, tmp_path):
    model = keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3, **arguments)
    with pytest.raises(CheckpointError, match=message):
        keras_vit.checkpoint.save_transformers(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_convert_between_families(tool, tmp_path, reference):  # noqa: F811
    """tools/convert_checkpoint.py: timm's fixture to a transformers directory, which
    gives the timm model's own logits; what a format cannot hold is refused by name:
    transformers' epsilon 1e-12 in timm's layout, timm's exact GELU in an .npz."""
    tool.convert(dict(FIXTURE_SIZES), _fixture("timm_token"), str(tmp_path / "hf"), "transformers")
    model = keras_vit.from_weights(str(tmp_path / "hf"), **FIXTURE_SIZES)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(reference["images"])),
        reference["timm_token"],
        atol=TOLERANCE,
        rtol=0,
    )
    with pytest.raises(CheckpointError, match="layer_norm_epsilon=1e-12"):
        tool.convert(
            dict(FIXTURE_SIZES), _fixture("transformers_classifier"), str(tmp_path / "t"), "timm"
        )
    with pytest.raises(CheckpointError, match="approximate_gelu=False"):
        tool.convert(dict(FIXTURE_SIZES), _fixture("timm_token"), str(tmp_path / "x.npz"))
    assert sorted(os.listdir(tmp_path)) == ["hf"]


def test_save_timm_refuses_pre_logits(tmp_path):
    model = keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3, representation_size=4)
    with pytest.raises(CheckpointError, match="no pre_logits"):
        keras_vit.checkpoint.save_timm(model, tmp_path / "out")


# -- Preprocessing: the file's normalisation in the model config and the exports ----

# timm's and transformers' ImageNet normalisation (timm.data.IMAGENET_DEFAULT_MEAN/STD):
# not the authors' 0.5, so each test below tells the two apart.
IMAGENET = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}


def _with_json(tmp_path, name, file, update):
    """A copy of fixture `name` whose JSON `file` is updated by `update(dict)`."""
    folder = tmp_path / name
    shutil.copytree(_fixture(name), folder)
    path = folder / file
    content = json.loads(path.read_text()) if path.exists() else {}
    update(content)
    path.write_text(json.dumps(content))
    return str(folder)


def test_timm_pretrained_cfg_mean_std_becomes_the_model_preprocessing(tmp_path):
    """timm's pretrained_cfg mean/std is the model's `preprocessing`, kept by a .keras
    round trip and written back by save_timm; the authors' 0.5 records None."""
    folder = _with_json(
        tmp_path, "timm_token", "config.json", lambda c: c["pretrained_cfg"].update(IMAGENET)
    )
    model = keras_vit.from_weights(folder, **FIXTURE_SIZES)
    assert model.preprocessing == IMAGENET
    assert model.get_config()["preprocessing"] == IMAGENET
    assert keras_vit.checkpoint.open_source(folder).config["preprocessing"] == IMAGENET
    model.save(tmp_path / "m.keras")
    assert keras.saving.load_model(tmp_path / "m.keras").preprocessing == IMAGENET
    keras_vit.checkpoint.save_timm(model, tmp_path / "back")
    written = json.loads((tmp_path / "back" / "config.json").read_text())["pretrained_cfg"]
    assert {key: written[key] for key in IMAGENET} == IMAGENET
    assert _load("timm_token").preprocessing is None  # the fixture's 0.5 / 0.5
    assert "preprocessing" not in _load("timm_token").get_config()


def test_transformers_preprocessor_config_becomes_the_model_preprocessing(tmp_path):
    """preprocessor_config.json's image_mean / image_std is the model's
    `preprocessing`; save_transformers writes it back; a rescale other than 1/255 is
    refused naming the file and key."""
    folder = _with_json(
        tmp_path,
        "transformers_classifier",
        state_dict.HUB_PREPROCESSOR,
        lambda c: c.update(image_mean=IMAGENET["mean"], image_std=IMAGENET["std"]),
    )
    model = keras_vit.from_weights(folder, **FIXTURE_SIZES)
    assert model.preprocessing == IMAGENET
    keras_vit.checkpoint.save_transformers(model, tmp_path / "back")
    again = keras_vit.from_weights(str(tmp_path / "back"), **FIXTURE_SIZES)
    assert again.preprocessing == IMAGENET
    bad = _with_json(
        tmp_path / "bad",
        "transformers_classifier",
        state_dict.HUB_PREPROCESSOR,
        lambda c: c.update(rescale_factor=1.0),
    )
    with pytest.raises(CheckpointError, match=r"preprocessor_config\.json: rescale_factor 1\.0"):
        keras_vit.from_weights(bad, **FIXTURE_SIZES)


def test_id2label_names_the_classes(tmp_path):
    """A transformers config.json's id2label, in label order, is the class names the
    exports default to (tools/export_savedmodel.py); placeholder 'LABEL_<i>' names
    and timm files state none."""
    labels = {"2": "cat", "0": "ant", "1": "bee"}
    folder = _with_json(
        tmp_path, "transformers_classifier", "config.json", lambda c: c.update(id2label=labels)
    )
    assert interop.class_names(folder) == ["ant", "bee", "cat"]
    assert interop.class_names(os.path.join(folder, "model.safetensors")) == ["ant", "bee", "cat"]
    assert interop.class_names(_fixture("transformers_classifier")) is None  # LABEL_0, ...
    assert interop.class_names(_fixture("timm_token")) is None


@pytest.mark.parametrize(
    "name, default", [("timm_token", "timm"), ("transformers_classifier", "transformers")]
)
def test_position_embeddings_resized_as_the_source_does(name, default):
    """At another resolution a timm file's position embeddings are resized by timm's
    method and a transformers folder's by transformers' (their forward at that size:
    tests/test_interop_torch.py); posemb_resize chooses another explicitly."""
    from keras_vit.checkpoint.layout import model_params
    from keras_vit.layers.position_embedding import resize_position_embedding

    posemb = "Transformer/posembed_input/pos_embedding"
    stored = model_params(_load(name))[posemb]
    at_24 = dict(FIXTURE_SIZES, image_size=24)
    for method in (None, "official"):
        model = keras_vit.from_weights(_fixture(name), **at_24, posemb_resize=method)
        expected = resize_position_embedding(stored, (4, 4), (6, 6), 1, method or default)
        np.testing.assert_array_equal(model_params(model)[posemb], expected)
    with pytest.raises(ValueError, match="posemb_resize='nearest' is not one of"):
        keras_vit.from_weights(_fixture(name), **at_24, posemb_resize="nearest")


def test_preprocess_input_with_a_model_preprocessing():
    """(x / 255 - mean) / std per channel; None: the authors' x / 127.5 - 1."""
    pixels = np.random.default_rng(0).integers(0, 256, (2, 4, 4, 3)).astype("uint8")
    got = keras.ops.convert_to_numpy(keras_vit.preprocess_input(pixels, IMAGENET))
    expected = (pixels / 255.0 - np.array(IMAGENET["mean"])) / np.array(IMAGENET["std"])
    # float32 arithmetic of values up to |2.7|: a few ulps of that scale.
    np.testing.assert_allclose(got, expected, atol=4 * np.spacing(np.float32(4)), rtol=0)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(keras_vit.preprocess_input(pixels, None)),
        pixels.astype("float32") / 127.5 - 1.0,
    )


@pytest.mark.parametrize(
    "preprocessing, message",
    [
        ({"mean": [0.5] * 3}, "exactly 'mean' and 'std'"),
        ({"mean": [0.5] * 3, "std": [0.5, 0.0, 0.5]}, r"\['std'\] must be positive"),
        ({"mean": [0.5] * 2, "std": [0.5] * 3}, r"\['mean'\] has 2 values for a model of 3"),
        ({"mean": "0.5", "std": [0.5] * 3}, r"\['mean'\] must be a number"),
    ],
)
def test_bad_preprocessing_is_refused_by_name(preprocessing, message):
    with pytest.raises(ValueError, match=message):
        keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3, preprocessing=preprocessing)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="SavedModels are TensorFlow's")
def test_savedmodel_uses_the_recorded_normalisation(tmp_path):
    """A model with ImageNet mean/std: the SavedModel's encoded-image signature serves
    the model's outputs on the same pixels normalised that way, not the authors' way."""
    import tensorflow as tf

    from keras_vit_deploy import serving

    model = keras_vit.VisionTransformer(
        **FIXTURE_SIZES, num_classes=3, preprocessing=IMAGENET, classifier_activation=None
    )
    head = model.get_layer("head")  # a non-zero head, so the logits depend on the input
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape))
    names = serving.export_saved_model(model, str(tmp_path / "sm"))
    served = tf.saved_model.load(str(tmp_path / "sm")).signatures[names[0]]
    pixels = np.random.default_rng(0).integers(0, 256, (2, 16, 16, 3)).astype("uint8")
    encoded = tf.stack([tf.io.encode_png(p) for p in pixels])  # lossless, at the model's size
    outputs = served(images=encoded)
    got = outputs.get("logits", outputs.get("probabilities")).numpy()
    normalised = (pixels / 255.0 - np.array(IMAGENET["mean"])) / np.array(IMAGENET["std"])
    logits = keras.ops.convert_to_numpy(model(normalised.astype("float32")))
    expected = scipy.special.softmax(logits, axis=-1) if "logits" not in outputs else logits
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    authors = keras.ops.convert_to_numpy(model(keras_vit.preprocess_input(pixels)))
    if "logits" not in outputs:
        authors = scipy.special.softmax(authors, axis=-1)
    assert np.abs(authors - got).max() > 100 * TOLERANCE  # the test tells the two apart


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="the exports are TensorFlow's")
def test_onnx_export_model_uses_the_recorded_normalisation():
    """The Keras model the ONNX export writes (deploy/onnx_export.py `prepare`) takes
    [0, 255] pixels through the model's own normalisation (`scale_offset`, equal to
    `preprocess_input` up to float32 rounding)."""
    from keras_vit_deploy import onnx_export

    model = keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3, preprocessing=IMAGENET)
    head = model.get_layer("head")  # a non-zero head, so the logits depend on the input
    head.kernel.assign(np.random.default_rng(1).normal(size=head.kernel.shape))
    prepared = onnx_export.prepare(model)
    pixels = np.random.default_rng(2).integers(0, 256, (1, 16, 16, 3)).astype("float32")
    got = keras.ops.convert_to_numpy(prepared(pixels)["logits"])
    expected = keras.ops.convert_to_numpy(model(keras_vit.preprocess_input(pixels, IMAGENET)))
    np.testing.assert_allclose(got, expected, atol=TOLERANCE, rtol=0)
    authors = keras.ops.convert_to_numpy(model(keras_vit.preprocess_input(pixels)))
    assert np.abs(authors - got).max() > 100 * TOLERANCE  # the test tells the two apart


# -- Bad inputs: a clear error before any weight is assigned ------------------------


@pytest.fixture
def target():
    """A model the bad files are loaded into, and its weights before."""
    model = keras_vit.VisionTransformer(**FIXTURE_SIZES, num_classes=3, approximate_gelu=False)
    return model, [np.array(w) for w in model.get_weights()]


def _unchanged(target):
    model, before = target
    for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)


def _timm_state():
    return state_dict.read_state_dict(os.path.join(FIXTURES, "timm_token", "model.safetensors"))


def test_safetensors_of_another_architecture(target, tmp_path):
    path = tmp_path / "resnet.safetensors"
    state_dict.write_safetensors(
        path, {"conv1.weight": np.zeros((4, 3, 3, 3), np.float32), "fc.weight": np.zeros((2, 4))}
    )
    with pytest.raises(CheckpointError, match=r"neither a timm nor a transformers.*conv1\.weight"):
        keras_vit.load_weights(target[0], str(path))
    _unchanged(target)


def test_transformers_config_of_another_model_type(target, tmp_path):
    directory = tmp_path / "deit"
    shutil.copytree(_fixture("transformers_classifier"), directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "deit"}))
    with pytest.raises(CheckpointError, match="model_type 'deit' is not 'vit'"):
        keras_vit.load_weights(target[0], str(directory))
    _unchanged(target)


@pytest.mark.parametrize(
    "key, shape, feature",
    [
        ("rope.freqs", (4,), "rotary position embeddings"),
        ("dist_token", (1, 1, 8), "distillation token"),
        # A square pos_embed beside a class token: it covers the prefix tokens too.
        ("reg_token", (1, 4, 8), "position embeddings on register tokens"),
        ("blocks.0.attn.q_norm.weight", (4,), "qk_norm"),
        ("patch_embed.backbone.stem.conv.weight", (4, 3, 7, 7), "hybrid ResNet"),
    ],
)
def test_refused_feature_is_named(key, shape, feature, target, tmp_path):
    path = tmp_path / "refused.safetensors"
    state_dict.write_safetensors(path, {**_timm_state(), key: np.zeros(shape, np.float32)})
    with pytest.raises(RefusedFeatureError, match=f"{feature} \\(key '{key}'\\)"):
        keras_vit.load_weights(target[0], str(path))
    _unchanged(target)


def test_quick_gelu_in_a_transformers_config_builds_a_quick_gelu_model(tmp_path):
    directory = tmp_path / "quick"
    shutil.copytree(_fixture("transformers_classifier"), directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "hidden_act": "quick_gelu"}))
    model = keras_vit.from_weights(str(directory), **FIXTURE_SIZES)
    assert model.quick_gelu and model.get_config()["quick_gelu"]


def test_pickle_without_torch(target, tmp_path, monkeypatch):
    """A .bin needs torch: without it, one error saying to install it or convert the
    file to safetensors (the file is never unpickled otherwise)."""
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(b"not read")
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    with pytest.raises(ImportError, match=r"pytorch_model\.bin.*needs torch.*safetensors"):
        keras_vit.load_weights(target[0], str(path))
    _unchanged(target)


def test_sizes_disagreeing_with_the_config_are_named(tmp_path):
    with pytest.raises(CheckpointError, match="num_attention_heads 2, the model's num_heads is 4"):
        keras_vit.from_weights(
            _fixture("transformers_classifier"), **{**FIXTURE_SIZES, "num_heads": 4}
        )


def test_transformers_file_without_its_config(tmp_path):
    shutil.copy(os.path.join(_fixture("transformers_classifier"), "model.safetensors"), tmp_path)
    with pytest.raises(CheckpointError, match="config.json \\(model_type 'vit'\\) must be beside"):
        interop.open_file(tmp_path / "model.safetensors")


# -- The layer option ------------------------------------------------------------------


def test_encoder_without_final_norm():
    """final_norm=False: no encoder_norm (its weights absent), the blocks' output as
    it is, and the option in the config."""
    kwargs = dict(grid_size=(2, 2), num_layers=1, num_heads=2, mlp_dim=8, num_prefix_tokens=0)
    tokens = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    plain = Encoder(**kwargs)
    plain(tokens)
    bare = Encoder.from_config({**plain.get_config(), "final_norm": False})
    bare(tokens)
    bare.set_weights(plain.get_weights()[:-2])  # all but encoder_norm's gamma, beta
    assert bare.encoder_norm is None and len(bare.weights) == len(plain.weights) - 2
    _, states = plain(tokens, return_hidden_states=True)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(bare(tokens)), keras.ops.convert_to_numpy(states[-1])
    )


@pytest.mark.parametrize(
    "option", [{"approximate_gelu": False}, {"preprocessing": {"mean": [0.5], "std": [0.25]}}]
)
def test_an_npz_refuses_what_it_cannot_record(option, tmp_path):
    """An official .npz records no family option and no normalisation: saving a model with
    one is refused, naming it, and no file is written."""
    from keras_vit import checkpoint

    model = keras_vit.VisionTransformer(
        image_size=16, patch_size=8, hidden_size=8, mlp_dim=16, num_heads=2, num_layers=1,
        num_classes=3, **option,
    )  # fmt: skip
    path = tmp_path / "model.npz"
    (key,) = option
    with pytest.raises(checkpoint.CheckpointError, match=f"records no family options.*{key}="):
        checkpoint.save_checkpoint(model, str(path))
    assert not path.exists()
