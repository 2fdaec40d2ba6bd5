"""TFLite files (tools/export_tflite.py, deploy/tflite.py): each quantisation's
file, run by the interpreter on real Fashion-MNIST images, follows the Keras
model; only builtin ops; the report and bad calibration data."""

import json

import export_testing as et
import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit_data import fashion_mnist as fashion_mnist_data
from keras_vit_deploy import (
    datasets,
    keras_runtime,
    preprocessing,
    report,
    serving,
    tflite,
    tflite_runtime,
)

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)

NUM_IMAGES = 200
# Per quantisation: max |delta probability| on NUM_IMAGES for the briefly
# trained tiny model (et.assert_probabilities_follow). float32: the same arithmetic
# reordered; float16 weights: relative error ~1e-3 per weight; int8 steps are
# 1/127 of a tensor's range (weights; and activations' calibrated ranges for full
# int8). The top-1 agreement targets (float16 99.5%, dynamic_int8 99%,
# int8 98%) are measured on 1000 images by benchmarks/tflite.py. int8_matmul
# quantises the same matmuls as int8 but keeps LayerNorm, softmax and GELU float:
# asked as much as dynamic_int8.
MAX_DELTA = {
    "none": 1e-5,
    "float16": 1e-2,
    "dynamic_int8": 0.05,
    "int8": 0.1,
    "int8_matmul": 0.05,
}


@pytest.fixture(scope="module")
def model():
    return et.tiny_classifier()


@pytest.fixture(scope="module")
def saved_model(model, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("tflite") / "saved_model")
    serving.export_saved_model(model, path)
    return path


@pytest.fixture(scope="module")
def images():
    return et.fashion_mnist(NUM_IMAGES)


@pytest.fixture(scope="module")
def calibration_records(tmp_path_factory):
    """The first 100 Fashion-MNIST training images (not the compared ones)."""
    train, labels = fashion_mnist_data.read_split(fashion_mnist_data.FASHION_MNIST_DIR, "train")
    train, labels = train[:100], labels[:100]
    path = tmp_path_factory.mktemp("records") / "train-00000-of-00001.tfrecord"
    return et.write_tfrecord(str(path), train[..., None], labels)


@pytest.fixture(scope="module")
def converted(saved_model, calibration_records):
    """{quantization: .tflite bytes}."""
    pixels, _ = datasets.tfrecord_images(calibration_records, (et.IMAGE_SIZE, et.IMAGE_SIZE))
    return {
        q: tflite.convert_saved_model(saved_model, q, pixels if q in tflite.CALIBRATED else None)
        for q in tflite.QUANTIZATIONS
    }


@pytest.mark.parametrize("quantization", tflite.QUANTIZATIONS)
def test_converted_file_follows_the_keras_model(quantization, converted, model, images):
    pixels, _ = images
    expected = et.keras_probabilities(model, pixels)
    result = tflite_runtime.TFLiteClassifier(converted[quantization]).predict(pixels)
    et.assert_probabilities_follow(result, expected, MAX_DELTA[quantization])
    np.testing.assert_allclose(result.sum(axis=1), 1.0, atol=0.02)


def test_quantised_files_store_narrower_weights(converted):
    weights = {q: tflite.constant_bytes(content) for q, content in converted.items()}
    sizes = {q: len(content) for q, content in converted.items()}
    # float16 halves every float constant; int8 quarters the large ones (small
    # tensors, int32 biases and quantisation parameters stay wider).
    assert weights["float16"] <= 0.51 * weights["none"]
    assert weights["dynamic_int8"] <= 0.3 * weights["none"]
    assert weights["int8"] <= 0.3 * weights["none"]
    assert weights["int8_matmul"] <= 0.3 * weights["none"]
    assert (
        sizes["none"]
        > sizes["float16"]
        > max(sizes["dynamic_int8"], sizes["int8"], sizes["int8_matmul"])
    )


def test_ops_are_builtin_and_int8_takes_uint8_pixels(converted):
    for quantization, content in converted.items():
        counts = tflite.operator_counts(content)
        assert not tflite.non_builtin_ops(counts), (quantization, counts)
        # The encoder's matmuls, the tanh GELU and the softmax are all there.
        assert {"CONV_2D", "FULLY_CONNECTED", "BATCH_MATMUL", "GELU", "SOFTMAX"} <= set(counts)
    int8 = tflite_runtime.TFLiteClassifier(converted["int8"])
    assert int8.input["dtype"] == np.uint8
    assert tuple(int8.input["shape"]) == (1, et.IMAGE_SIZE, et.IMAGE_SIZE, 3)
    assert tflite_runtime.TFLiteClassifier(converted["none"]).input["dtype"] == np.float32


def _operator_input_dtypes(content):
    """{operator kind: set of its first input's dtype names} of a .tflite file."""
    runner = tflite_runtime.make_interpreter(content)
    runner.allocate_tensors()
    dtypes = {t["index"]: np.dtype(t["dtype"]).name for t in runner.get_tensor_details()}
    kinds = {}
    for op in runner._get_ops_details():
        kinds.setdefault(op["op_name"], set()).add(dtypes[op["inputs"][0]])
    return kinds


def test_int8_matmul_quantises_only_the_matmuls(converted):
    kinds = _operator_input_dtypes(converted["int8_matmul"])
    for kind in tflite.INT8_MATMUL_OPS:
        assert kinds[kind] == {"int8"}, (kind, kinds[kind])
    for kind in ("BATCH_MATMUL", "SOFTMAX", "GELU", "MEAN"):
        assert kinds[kind] == {"float32"}, (kind, kinds[kind])
    assert tflite_runtime.TFLiteClassifier(converted["int8_matmul"]).input["dtype"] == np.float32
    full = _operator_input_dtypes(converted["int8"])
    assert full["SOFTMAX"] == {"int8"} and full["BATCH_MATMUL"] == {"int8"}


def test_int8_matmul_without_calibration_images_is_refused(saved_model):
    with pytest.raises(tflite.ConversionError, match="int8_matmul needs representative"):
        tflite.convert_saved_model(saved_model, "int8_matmul", None)


def test_a_flex_op_is_detected_and_refused(tmp_path):
    @tf.function(input_signature=[tf.TensorSpec([4], tf.float32)])
    def needs_flex(x):
        return tf.strings.to_number(tf.strings.as_string(x))  # no TFLite builtin

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [needs_flex.get_concrete_function()], needs_flex
    )
    converter.target_spec.supported_ops = [
        tf.lite.OpsSet.TFLITE_BUILTINS,
        tf.lite.OpsSet.SELECT_TF_OPS,
    ]
    content = converter.convert()
    foreign = tflite.non_builtin_ops(tflite.operator_counts(content))
    assert foreign and all(name.startswith("CUSTOM:Flex") for name in foreign)
    with pytest.raises(tflite.ConversionError, match="non-builtin ops: CUSTOM:Flex"):
        tflite.assert_builtin_only(content)


def test_cli_run_dir_int8_with_report(model, calibration_records, tmp_path):
    run_dir = et.write_run_dir(model, str(tmp_path / "run"), et.CLASS_NAMES)
    output, report_path = tmp_path / "vit.tflite", tmp_path / "report.json"
    result = et.run_tool(
        [
            "tools/export_tflite.py",
            f"--run_dir={run_dir}",
            "--quantization=int8",
            f"--representative_data={calibration_records}",
            f"--output={output}",
            f"--report={report_path}",
            "--num_eval_images=100",
            "--latency_repeats=20",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    content = output.read_bytes()
    written = json.loads(report_path.read_text())
    assert written["file_size_bytes"] == len(content)
    assert written["op_counts"] == tflite.operator_counts(content)
    assert written["builtin_ops_only"] is True and written["reference"] == "keras"
    assert written["input"] == {"shape": [1, 28, 28, 3], "dtype": "uint8"}

    pixels, labels = et.fashion_mnist(100)
    expected = et.keras_probabilities(model, pixels)
    produced = tflite_runtime.TFLiteClassifier(content).predict(pixels)
    agreement = np.mean(produced.argmax(1) == expected.argmax(1))
    assert written["num_images"] == 100
    assert written["top1_agreement"] == pytest.approx(agreement)
    assert written["max_abs_delta_probability"] == pytest.approx(
        np.abs(produced - expected).max(), abs=1e-6
    )
    assert written["reference_accuracy"] == pytest.approx(np.mean(expected.argmax(1) == labels))
    assert written["tflite_accuracy"] == pytest.approx(np.mean(produced.argmax(1) == labels))
    for threads in ("1_threads", "2_threads"):
        latency = written["latency_per_image"][threads]
        assert latency["repeats"] == 20 and 0 < latency["median_ms"] < 1000


def test_report_rejects_labels_of_another_data_set():
    probabilities = np.full((2, 10), 0.1)
    with pytest.raises(datasets.DataError, match="labels up to 42; the model has 10 classes"):
        report.compare(probabilities, probabilities, labels=np.array([1, 42]), file_format="tflite")


def test_representative_data_that_cannot_match_the_model(saved_model, tmp_path):
    size = (et.IMAGE_SIZE, et.IMAGE_SIZE)
    with pytest.raises(datasets.DataError, match="no TFRecord files match"):
        datasets.tfrecord_images(str(tmp_path / "nothing-*"), size)
    # RGBA is read as the serving signatures read it: the alpha dropped, not composited.
    rgba_pixels = et.random_pixels(3, size, 4)
    rgba = et.write_tfrecord(str(tmp_path / "rgba.tfrecord"), rgba_pixels, [0, 1, 2])
    np.testing.assert_array_equal(datasets.tfrecord_images(rgba, size)[0], rgba_pixels[..., :3])
    garbage = str(tmp_path / "garbage.tfrecord")
    with tf.io.TFRecordWriter(garbage) as writer:
        writer.write(et.example(b"\x89PNG\r\n\x1a\n broken", [0]))
    with pytest.raises(
        datasets.DataError,
        match="garbage.tfrecord record 0: not a tf.train.Example with a decodable 'image/encoded'",
    ):
        datasets.tfrecord_images(garbage, size)
    with pytest.raises(
        tflite.ConversionError,
        match=r"shape \(2, 32, 32, 3\); the model "
        r"takes \(N, 28, 28, 3\)",
    ):
        tflite.convert_saved_model(saved_model, "int8", np.zeros((2, 32, 32, 3), np.uint8))
    with pytest.raises(tflite.ConversionError, match="needs representative images"):
        tflite.convert_saved_model(saved_model, "int8")


# float32 files of the OUTPUT_CASES models against Keras: max |delta| <=
# FEATURE_RTOL * max(1, max |value|). Both run the same float32 operations, in
# other orders and kernels (XNNPACK against TensorFlow's), so the error is
# relative to the values, as tests/test_export_onnx.py's LOGIT_RTOL argues: a
# dot product of n <= 64 terms here is off by about sqrt(n) * 2**-24 of its
# scale per block. 1e-5 is ~170 roundings of the scale; a wrong channel order,
# scaling or a second softmax moves these outputs by 1e-2 or more.
FEATURE_RTOL = 1e-5


@pytest.mark.parametrize("case", sorted(et.OUTPUT_CASES))
def test_converted_file_follows_models_of_any_output(case):
    """Softmax, 1 and 4 channels, features and a feature map: the file takes the
    model's channels and returns its main output under that output's name."""
    _, _, output, shape = et.OUTPUT_CASES[case]
    model = et.output_case_model(case)
    saved_model = et.output_case_saved_model(case)
    content = tflite.convert_saved_model(saved_model, "none")
    assert not tflite.non_builtin_ops(tflite.operator_counts(content))
    runner = tflite_runtime.TFLiteClassifier(content)
    assert tuple(runner.input["shape"]) == (1, 16, 16, model.channels)
    assert runner.output_name == output and tuple(runner.output["shape"]) == (1, *shape)
    pixels = et.random_pixels(6, (16, 16), model.channels)
    expected = et.keras_outputs(model, pixels)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(runner.predict(pixels), expected, atol=FEATURE_RTOL * scale)
    # The Keras model, behind the runtimes' one interface, names its output as the file does.
    keras_model = keras_runtime.KerasClassifier(model)
    assert keras_model.output_name == output
    assert (keras_model.image_size, keras_model.channels) == (runner.image_size, runner.channels)
    with pytest.raises(
        ValueError,
        match=rf"pixels must be \(N, 16, 16, {model.channels}\) for this tflite model, got \(6, 16, 16, 2\)",
    ):
        runner.predict(et.random_pixels(6, (16, 16), 2))
    # The report compares what the file returns, against Keras or the SavedModel.
    loaded = tf.saved_model.load(saved_model)
    np.testing.assert_allclose(
        report.saved_model_reference(loaded)(pixels), expected, atol=FEATURE_RTOL * scale
    )
    result = report.build_report(
        runner,
        tflite.file_facts(content, "none"),
        report.keras_reference(model),
        pixels,
        threads=(1,),
        latency_repeats=2,
    )
    unit = report.UNITS[output]
    assert result["output"] == output and result["input"]["shape"] == [1, 16, 16, model.channels]
    assert result[f"max_abs_delta_{unit}"] == pytest.approx(
        np.abs(runner.predict(pixels) - expected).max(), abs=1e-7
    )
    assert ("top1_agreement" in result) == (output == "probabilities")
    assert ("max_abs_reference" in result) == (output != "probabilities")
    if model.channels == 4:
        with pytest.raises(tflite.ConversionError, match=r"takes \(N, 16, 16, 4\)"):
            tflite.convert_saved_model(saved_model, "int8", np.zeros((2, 16, 16, 3), np.uint8))


def test_eval_pixels_are_brought_to_the_model_channels():
    rgb = et.random_pixels(2, (4, 4), 3)
    grey = preprocessing.match_channels(rgb, 1)
    expected = np.round(rgb @ np.asarray(preprocessing.LUMA))[..., None]
    np.testing.assert_array_equal(grey, expected.astype(np.uint8))
    repeated = np.repeat(grey, 3, axis=-1)
    np.testing.assert_array_equal(preprocessing.match_channels(repeated, 1), grey)  # exact
    np.testing.assert_array_equal(preprocessing.match_channels(grey, 3), repeated)
    with pytest.raises(
        preprocessing.ChannelError, match="eval: 3-channel images; the model takes 4"
    ):
        preprocessing.match_channels(rgb, 4, "eval")


def test_other_sizes_and_grayscale_are_brought_to_the_model():
    image = np.random.default_rng(0).integers(0, 256, (40, 36, 1), dtype=np.uint8)
    pixels = datasets.to_model_pixels(image, (28, 28), "test")
    expected = tf.image.resize(np.repeat(image, 3, axis=-1), (28, 28)).numpy()
    assert pixels.dtype == np.uint8 and pixels.shape == (28, 28, 3)
    np.testing.assert_array_equal(pixels, np.clip(np.round(expected), 0, 255))
