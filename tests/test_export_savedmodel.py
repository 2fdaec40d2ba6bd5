"""The SavedModel for TF Serving (tools/export_savedmodel.py, deploy/serving.py):
signatures loaded in a fresh TensorFlow-only process and through saved_model_cli
give the Keras model's predictions; bad requests fail with clear messages."""

import json
import textwrap

import export_testing as et
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import run_directory
from keras_vit_deploy import flags as deploy_flags
from keras_vit_deploy import preprocessing, serving, sources

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)

NUM_IMAGES = 6
# The exported graph and Keras' reorder float32 sums: logits of magnitude ~10
# can then differ by ~1e-5 and probabilities by as much; scaling, resizing or
# channel mistakes move them by orders of magnitude more.
ATOL = 5e-5
MAX_PIXELS = 1_000_000  # --max_pixels of the CLI export (the default is 40 megapixels)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(Keras model, SavedModel dir) exported by the CLI from a run directory."""
    root = tmp_path_factory.mktemp("export")
    model = et.tiny_classifier()
    run_dir = et.write_run_dir(model, str(root / "run"))
    names = root / "classes.txt"
    names.write_text("\n".join(et.CLASS_NAMES) + "\n")
    output = str(root / "saved_model")
    result = et.run_tool(
        [
            "tools/export_savedmodel.py",
            f"--run_dir={run_dir}",
            f"--class_names={names}",
            "--top_k=3",
            f"--max_pixels={MAX_PIXELS}",
            f"--output={output}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "signatures: serving_default, predict_images" in result.stdout
    assert f"encoded images up to {MAX_PIXELS} pixels" in result.stdout
    return model, output


@pytest.fixture(scope="module")
def loaded(exported):
    return tf.saved_model.load(exported[1])


@pytest.fixture(scope="module")
def images():
    pixels, labels = et.fashion_mnist(NUM_IMAGES)
    return pixels, labels


_FRESH_PROCESS = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf
    inputs = np.load(sys.argv[2])
    model = tf.saved_model.load(sys.argv[1])
    calls = {"serving_default": "encoded", "predict_images": "pixels",
             "predict_images_float32": "pixels_float", "predict_examples": "examples"}
    outputs = {}
    for name, key in calls.items():
        argument = "examples" if name == "predict_examples" else "images"
        result = model.signatures[name](**{argument: tf.constant(inputs[key])})
        for k, v in result.items():
            v = v.numpy()
            outputs[name + "/" + k] = v.astype(bytes) if v.dtype == object else v
    # TF Serving's way: a TF1 session on the MetaGraph, a bad image in the batch.
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], sys.argv[1])
        signature = meta.signature_def["serving_default"]
        try:
            session.run(signature.outputs["probabilities"].name,
                        {signature.inputs["images"].name: inputs["bad_batch"]})
            outputs["session_error"] = np.array("no error")
        except tf.errors.InvalidArgumentError as e:
            outputs["session_error"] = np.array(e.message)
    leaked = [m for m in ("keras_vit", "deploy") if m in sys.modules]
    assert not leaked, leaked
    np.savez(sys.argv[3], **outputs)
""")


def _requests(pixels, labels):
    """The inputs of every signature for `pixels`, and the pixels the model
    should see for the encoded ones (JPEG decoded, odd size resized)."""
    gray_pngs = [tf.io.encode_png(image[..., :1]).numpy() for image in pixels]
    jpeg = tf.io.encode_jpeg(pixels[0], quality=80).numpy()
    large = np.random.default_rng(3).integers(0, 256, (40, 36, 3), dtype=np.uint8)
    encoded = np.array(gray_pngs + [jpeg, tf.io.encode_png(large).numpy()], dtype=object)
    seen = np.concatenate(
        [
            pixels,
            tf.io.decode_jpeg(jpeg)[None].numpy(),
            tf.image.resize(large, (et.IMAGE_SIZE, et.IMAGE_SIZE))[None],
        ]
    )
    examples = np.array(
        [et.example(png, [int(label)]) for png, label in zip(gray_pngs, labels)], dtype=object
    )
    bad_batch = np.array([gray_pngs[0], gray_pngs[1], b"GIF? no, a text file"])
    return {
        "encoded": encoded.astype(bytes),
        "bad_batch": bad_batch,
        "pixels": pixels,
        "pixels_float": pixels.astype(np.float32),
        "examples": examples.astype(bytes),
    }, seen


def _check_outputs(outputs, probabilities, prefix=""):
    np.testing.assert_allclose(outputs[prefix + "probabilities"], probabilities, atol=ATOL)
    order = np.argsort(-probabilities, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(outputs[prefix + "top_k_classes"], order)
    np.testing.assert_allclose(
        outputs[prefix + "top_k_scores"], np.take_along_axis(probabilities, order, 1), atol=ATOL
    )
    names = np.asarray(et.CLASS_NAMES)[order]
    np.testing.assert_array_equal(outputs[prefix + "top_k_names"].astype(str), names)


def test_fresh_tensorflow_process_serves_the_keras_predictions(exported, images, tmp_path):
    model, saved_model = exported
    pixels, labels = images
    requests, seen = _requests(pixels, labels)
    np.savez(tmp_path / "in.npz", **requests)
    script = tmp_path / "serve.py"
    script.write_text(_FRESH_PROCESS)
    result = et.run_tool(
        [str(script), saved_model, str(tmp_path / "in.npz"), str(tmp_path / "out.npz")],
        fresh=True,  # what it imports is what it checks (tests/warm_programs.py)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = dict(np.load(tmp_path / "out.npz"))

    expected = et.keras_probabilities(model, pixels)
    assert len(set(expected.argmax(1))) > 1  # the check below can tell classes apart
    _check_outputs(outputs, et.keras_probabilities(model, seen), "serving_default/")
    for name in ("predict_images", "predict_images_float32", "predict_examples"):
        _check_outputs(outputs, expected, name + "/")
    np.testing.assert_array_equal(outputs["predict_examples/labels"], labels[:, None])
    assert (
        "serving_default: the image at batch index] [2] [is not a JPEG, PNG, GIF or BMP image"
    ) in str(outputs["session_error"])


def test_saved_model_cli_show_lists_the_signatures(exported):
    _, saved_model = exported
    result = et.run_tool([et.venv_tool("saved_model_cli"), "show", "--all", "--dir", saved_model])
    assert result.returncode == 0, result.stderr[-3000:]
    shown = result.stdout
    size = et.IMAGE_SIZE
    for name, dtype, shape in [
        ("serving_default", "DT_STRING", "(-1)"),
        ("predict_images", "DT_UINT8", f"(-1, {size}, {size}, 3)"),
        ("predict_images_float32", "DT_FLOAT", f"(-1, {size}, {size}, 3)"),
        ("predict_examples", "DT_STRING", "(-1)"),
    ]:
        section = shown.split(f"signature_def['{name}']:")[1].split("signature_def[")[0]
        assert f"dtype: {dtype}\n        shape: {shape}" in section, section
        assert "outputs['probabilities']" in section and f"shape: (-1, {et.NUM_CLASSES})" in section
        for output in ("top_k_classes", "top_k_scores", "top_k_names"):
            assert f"outputs['{output}']" in section


def test_saved_model_cli_run_predicts(exported, images, tmp_path):
    model, saved_model = exported
    pixels, _ = images
    cli = et.venv_tool("saved_model_cli")
    pngs = np.array([tf.io.encode_png(image).numpy() for image in pixels])
    np.save(tmp_path / "good.npy", pngs)
    result = et.run_tool(
        [
            cli,
            "run",
            "--dir",
            saved_model,
            "--tag_set",
            "serve",
            "--signature_def",
            "serving_default",
            "--inputs",
            f"images={tmp_path / 'good.npy'}",
            "--outdir",
            str(tmp_path / "out"),
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / "probabilities.npy"),
        et.keras_probabilities(model, pixels),
        atol=ATOL,
    )


def _fails(signature, match, **inputs):
    with pytest.raises(tf.errors.InvalidArgumentError, match=match):
        signature(**{k: tf.constant(v) for k, v in inputs.items()})


def test_bad_requests_fail_naming_the_problem(loaded, images):
    pixels, _ = images
    png = tf.io.encode_png(pixels[0]).numpy()
    alpha = np.full((28, 28, 1), 7, np.uint8)
    rgba = tf.io.encode_png(np.concatenate([pixels[0], alpha], -1)).numpy()
    truncated = png[:40]
    serve = loaded.signatures["serving_default"]
    _fails(serve, r"batch index\] \[1\] \[is not a JPEG", images=[png, b"not an image", png])
    # RGBA is taken, its alpha dropped (the trainers' rule): the RGB image's answer.
    served = serve(images=tf.constant([png, rgba]))
    for values in served.values():
        np.testing.assert_array_equal(values.numpy()[0], values.numpy()[1])
    _fails(serve, r"serving_default: empty batch", images=np.array([], dtype=bytes))
    _fails(serve, r"PNG", images=[png, truncated])
    _fails(
        loaded.signatures["predict_images"],
        r"predict_images: empty batch",
        images=np.zeros((0, 28, 28, 3), np.uint8),
    )
    _fails(
        loaded.signatures["predict_images_float32"],
        r"predict_images_float32: empty batch",
        images=np.zeros((0, 28, 28, 3), np.float32),
    )
    _fails(
        loaded.signatures["predict_images_float32"],
        r"pixel values must be in \[0, 255\] \(unscaled\); got min\] \[-1\]",
        images=pixels.astype(np.float32) / 127.5 - 1.0,
    )
    no_image = tf.train.Example(
        features=tf.train.Features(
            feature={
                "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[1]))
            }
        )
    )
    _fails(
        loaded.signatures["predict_examples"],
        r"Feature: image/encoded .* is required",
        examples=[no_image.SerializeToString()],
    )
    # A restored signature passes other shapes through to the graph (so does TF Serving).
    _fails(
        loaded.signatures["predict_images"],
        r"predict_images: images must be \(batch, 28, "
        r"28, 3\) pixels; got shape\] \[1 28 28 4\]",
        images=np.zeros((1, 28, 28, 4), np.uint8),
    )
    _fails(
        loaded.signatures["predict_images_float32"],
        r"got shape\] \[2 32 32 3\]",
        images=np.zeros((2, 32, 32, 3), np.float32),
    )


def test_the_max_pixels_flag_sets_the_limit_of_the_export(exported, loaded):
    assert serving.read_metadata(exported[1])["max_pixels"] == MAX_PIXELS
    at_limit = tf.io.encode_png(np.zeros((1000, 1000, 1), np.uint8)).numpy()
    above = tf.io.encode_png(np.zeros((1000, 1001, 1), np.uint8)).numpy()
    serve = loaded.signatures["serving_default"]
    assert serve(images=tf.constant([at_limit]))["probabilities"].shape == (1, et.NUM_CLASSES)
    _fails(
        serve,
        r"serving_default: the image at batch index 1 has 1001000 pixels \(1000 x 1001\), "
        f"more than the limit of {MAX_PIXELS} pixels",
        images=[at_limit, above],
    )


def test_image_size_comes_from_the_signature(loaded):
    assert serving.image_size_of(loaded) == (et.IMAGE_SIZE, et.IMAGE_SIZE)


def test_what_cannot_be_served_is_refused_naming_why(exported):
    model, _ = exported
    headless = type(model).from_config({**model.get_config(), "include_top": False})
    with pytest.raises(ValueError, match="class names label a classifier's outputs; model"):
        serving.SignatureFunctions(headless, class_names=et.CLASS_NAMES)
    with pytest.raises(ValueError, match="3 class names for a model with 10 classes"):
        serving.SignatureFunctions(model, class_names=["a", "b", "c"])
    inputs = keras.Input((None, None, 3), name="image")
    logits = keras.layers.Dense(3)(keras.layers.GlobalAveragePooling2D()(inputs))
    with pytest.raises(
        ValueError,
        match=r"'any_size' takes images of any size \(input size None x None\); the served "
        r"SavedModel is written at one fixed H x W: build the model at a fixed size",
    ):
        serving.SignatureFunctions(keras.Model(inputs, logits, name="any_size"))


# -- models other than a logits classifier ------------------------------------------


def _luma(pixels):
    return np.tensordot(pixels.astype(np.float64), preprocessing.LUMA, ([-1], [0]))[..., None]


@pytest.mark.parametrize("case", sorted(et.OUTPUT_CASES))
def test_saved_model_follows_the_model(case):
    """Softmax, 1 and 4 channels, features and a feature map: the signatures are
    named for what they return, take the model's channels and give its outputs."""
    _, kind, output, shape = et.OUTPUT_CASES[case]
    model = et.output_case_model(case)
    loaded = tf.saved_model.load(et.output_case_saved_model(case))
    names = serving.signature_names(kind)
    assert sorted(loaded.signatures) == sorted(names)
    served = serving.loaded_signatures(loaded)
    channels = model.channels
    assert (served.image_size, served.channels, served.output) == ((16, 16), channels, output)
    pixels = et.random_pixels(4, (16, 16), channels)
    expected = et.keras_outputs(model, pixels)
    scale = max(1.0, float(np.abs(expected).max()))
    extra = {"top_k_classes", "top_k_scores"} if kind == "classifier" else set()
    for name, images in [(names[1], pixels), (names[2], pixels.astype(np.float32))]:
        result = loaded.signatures[name](images=tf.constant(images))
        assert set(result) == {output} | extra
        assert result[output].shape == (4, *shape)
        np.testing.assert_allclose(result[output].numpy(), expected, atol=ATOL * scale)
    if kind == "classifier":  # the model's own softmax, not a second one
        raw = model.predict(pixels.astype(np.float32) / 127.5 - 1.0, verbose=0)
        np.testing.assert_allclose(expected, raw, atol=1e-6)
        np.testing.assert_allclose(expected.sum(axis=1), 1.0, atol=1e-5)
        assert np.abs(tf.nn.softmax(raw).numpy() - raw).max() > 0.05  # that would differ

    # Encoded images, brought to the model's channels.
    rgb = et.random_pixels(2, (16, 16), 3, seed=1)
    if channels == 1:  # grey as it is, RGB to its luma
        encoded = [tf.io.encode_png(pixels[0]), tf.io.encode_png(rgb[0])]
        seen = np.stack([pixels[0].astype(np.float64), _luma(rgb[0])])
    elif channels == 3:  # grey repeated to RGB
        encoded = [tf.io.encode_png(rgb[0][..., :1]), tf.io.encode_png(rgb[1])]
        seen = np.stack([np.repeat(rgb[0][..., :1], 3, axis=-1), rgb[1]])
    else:  # a 4-channel PNG as it is
        encoded = [tf.io.encode_png(pixels[0]), tf.io.encode_png(pixels[1])]
        seen = pixels[:2]
    result = loaded.signatures[names[0]](images=tf.constant([e.numpy() for e in encoded]))
    np.testing.assert_allclose(
        result[output].numpy(), et.keras_outputs(model, seen), atol=ATOL * scale
    )
    examples = [et.example(e.numpy(), [i]) for i, e in enumerate(encoded)]
    result = loaded.signatures[names[3]](examples=tf.constant(examples))
    np.testing.assert_array_equal(result["labels"].numpy(), [[0], [1]])
    np.testing.assert_allclose(
        result[output].numpy(), et.keras_outputs(model, seen), atol=ATOL * scale
    )

    # Images the model cannot take fail naming the channels: a grey or RGB model takes
    # any PNG (alpha dropped), a 4-channel model 4 channels alone.
    have = {1: 4, 3: 4, 4: 3}[channels]
    bad = tf.io.encode_png(et.random_pixels(1, (8, 8), have)[0]).numpy()
    if channels == 4:
        _fails(
            loaded.signatures[names[0]],
            r"batch index\] \[0\] \[has\] \[3\] \[channels; expected 4",
            images=[bad],
        )
    _fails(
        loaded.signatures[names[1]],
        rf"{names[1]}: images must be \(batch, 16, 16, {channels}\) pixels; got shape\] "
        rf"\[1 16 16 {have}\]",
        images=np.zeros((1, 16, 16, have), np.uint8),
    )


def test_cli_exports_what_the_output_flags_ask(exported, tmp_path):
    """--channels=1 --noinclude_top --pooling=none on a trained RGB run: the grey
    feature map of an image is the RGB model's for that image repeated to RGB."""
    model, _ = exported
    run_dir = et.write_run_dir(model, str(tmp_path / "run"))
    output = str(tmp_path / "grey_map")
    result = et.run_tool(
        [
            "tools/export_savedmodel.py",
            f"--run_dir={run_dir}",
            "--channels=1",
            "--noinclude_top",
            "--pooling=none",
            f"--output={output}",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "1 channels, feature_map (4, 4, 64); signatures: serving_default, " in result.stdout
    assert "adapted to 1 input channels (summed over RGB)" in result.stderr
    grey, _ = et.fashion_mnist(3)
    grey = grey[..., :1]
    signature = tf.saved_model.load(output).signatures["feature_map_images"]
    produced = signature(images=tf.constant(grey))["feature_map"].numpy()
    rgb_map = deploy_flags.with_outputs(model, include_top=False, pooling=None)
    expected = et.keras_outputs(rgb_map, np.repeat(grey, 3, axis=-1))
    np.testing.assert_allclose(produced, expected, atol=ATOL * max(1.0, np.abs(expected).max()))
    with pytest.raises(ValueError, match="--pooling applies to a headless model"):
        deploy_flags.with_outputs(model, pooling="avg")


def test_model_sources_fail_clearly(tmp_path):
    with pytest.raises(ValueError, match="Unknown model 'ViT_Q99'"):
        sources.load_model(model="ViT_Q99", weights="imagenet21k")
    with pytest.raises(sources.SourceError, match="--model=ViT_Ti16 needs --weights"):
        sources.load_model(model="ViT_Ti16")
    with pytest.raises(FileNotFoundError, match="Weights file not found: .*missing.npz"):
        sources.load_model(model="ViT_Ti16", weights=str(tmp_path / "missing.npz"))
    with pytest.raises(sources.SourceError, match="exactly one of"):
        sources.load_model(run_dir=str(tmp_path), model="ViT_Ti16", weights="x")
    (tmp_path / run_directory.MODEL_CONFIG).write_text("{}")
    with pytest.raises(sources.SourceError, match="missing .*model.weights.h5"):
        sources.load_model(run_dir=str(tmp_path))
    names = tmp_path / "names.json"
    names.write_text(json.dumps({"class_names": ["a", "b"]}))
    with pytest.raises(sources.SourceError, match="has 2 class names; the model has 10"):
        sources.read_class_names(str(names), 10)
    assert sources.read_class_names(str(names), 2) == ["a", "b"]
