"""ONNX files (tools/export_onnx.py, deploy/onnx_*.py): a tiny ViT and a tiny hybrid,
exported through Keras' own exporter and run by onnxruntime on real Fashion-MNIST
images, follow the Keras model; dynamic batch and float16; models that cannot be
exported and a missing dependency are refused with the reason; the CLI's report."""

import importlib.util
import json
import sys

import export_testing as et
import keras
import numpy as np
import pytest

import keras_vit
from keras_vit_deploy import (
    datasets,
    onnx_check,
    onnx_export,
    onnx_file,
    onnx_packages,
    onnx_runtime,
)

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)
needs_onnx = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in onnx_packages.REQUIRED),
    reason=f"needs tf2onnx, onnxruntime and onnx: {onnx_packages.INSTALL_COMMAND}",
)

NUM_IMAGES = 200
# float32 ONNX against float32 Keras: max |delta logit| <= LOGIT_RTOL * the
# logits' scale, max(1, max |logit|): 1e-5 on logits of O(1). Both runtimes do
# the same float32 operations; only the summation order and the kernels differ
# (onnxruntime's MLAS against TensorFlow's Eigen/oneDNN, with other fusions), so
# the error is relative to the values: each reordered dot product of n terms
# (n <= 576: the hybrid's 3x3x64 convolution; 64-256 in the ViTs) is off by
# about sqrt(n) * 2**-24 of the sum of its |terms|, and two encoder blocks pass
# that on through LayerNorm without amplifying it much. Measured: 4.3e-6 on the
# trained ViT's logits of up to 7 (6e-7 of the scale), 2.0e-6 on the random
# hybrid's of up to 1.7 (1.2e-6). 1e-5 is ~170 float32 roundings (2**-24 each)
# of the scale, an 8x margin or more, and still below what a conversion that
# computes something else gives (erf instead of tanh GELU alone moves an
# activation by up to 5e-4).
LOGIT_RTOL = 1e-5
# float16 (mixed_float16) against float32 Keras: 11-bit activations, as the
# TFLite float16 test asks (tests/test_export_tflite.py).
FLOAT16_MAX_DELTA = 1e-2  # max |delta probability| (et.assert_probabilities_follow)
HYBRID_SIZE = 32  # R(1,1) has stride 8: a 4x4 feature map, 16 tokens of patch 1


@pytest.fixture(scope="module")
def vit():
    return et.tiny_classifier()


@pytest.fixture(scope="module")
def hybrid():
    """A hybrid R(1,1) + 2-block ViT (tests/test_hybrid.py's small one) with fixed
    random weights (the head, zero at init, too)."""
    keras.utils.set_random_seed(1)
    model = keras_vit.VisionTransformer(
        image_size=HYBRID_SIZE,
        resnet=(1, 1),
        patch_size=1,
        hidden_size=48,
        mlp_dim=96,
        num_heads=4,
        num_layers=2,
        num_classes=et.NUM_CLASSES,
        name="tiny_hybrid",
    )
    rng = np.random.default_rng(1)
    model.set_weights(
        [w + rng.normal(0, 0.1, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


@pytest.fixture(scope="module")
def images():
    return et.fashion_mnist(NUM_IMAGES)


def _keras_logits(model, pixels):
    return model.predict(np.asarray(pixels, np.float32) / 127.5 - 1.0, verbose=0)


@needs_onnx
@pytest.mark.parametrize("kind,dynamic_batch", [("vit", False), ("vit", True), ("hybrid", False)])
def test_exported_file_follows_the_keras_model(kind, dynamic_batch, vit, hybrid, images, tmp_path):
    model = {"vit": vit, "hybrid": hybrid}[kind]
    size = tuple(model.image_size)
    pixels = (
        images[0]
        if size == (et.IMAGE_SIZE, et.IMAGE_SIZE)
        else datasets.fashion_mnist_test(size, NUM_IMAGES)[0]
    )
    path = str(tmp_path / f"{kind}.onnx")
    exported = onnx_export.export_keras_model(model, path, dynamic_batch=dynamic_batch)
    assert exported["input"] == {
        "name": "images",
        "dtype": "float32",
        "shape": [None if dynamic_batch else 1, *size, 3],
    }
    assert exported["outputs"] == ["logits", "probabilities"]

    classifier = onnx_runtime.ONNXClassifier(path)
    expected = _keras_logits(model, pixels)
    scale = max(1.0, float(np.abs(expected).max()))
    assert scale < 10  # logits of O(1), as LOGIT_RTOL assumes
    produced = classifier.logits(pixels)  # batch-1 file: one image per run; else 100
    np.testing.assert_allclose(produced, expected, rtol=0, atol=LOGIT_RTOL * scale)
    probabilities = classifier.predict(pixels)
    assert np.array_equal(probabilities.argmax(1), expected.argmax(1))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=1e-5)
    counts = onnx_file.operator_counts(path)
    assert not onnx_file.non_standard_ops(counts)
    assert {"Conv", "MatMul", "Softmax", "Tanh"} <= set(counts)  # tanh GELU stays tanh
    if kind == "hybrid":
        assert counts["Conv"] >= 8 and "MaxPool" in counts  # the ResNet is in the file


@needs_onnx
def test_float16_runs_and_halves_the_weights(vit, images, tmp_path):
    pixels, _ = images
    paths = {p: str(tmp_path / f"{p}.onnx") for p in onnx_export.PRECISIONS}
    for precision, path in paths.items():
        onnx_export.export_keras_model(vit, path, precision)
    expected = et.keras_probabilities(vit, pixels)
    produced = onnx_runtime.ONNXClassifier(paths["float16"]).predict(pixels)
    et.assert_probabilities_follow(produced, expected, FLOAT16_MAX_DELTA)
    assert "Cast" in onnx_file.operator_counts(paths["float16"])
    # float16 weights; LayerNorm scales and biases stay float32, as Keras keeps them.
    assert onnx_file.constant_bytes(paths["float16"]) <= 0.55 * onnx_file.constant_bytes(
        paths["float32"]
    )


@needs_onnx
def test_the_check_after_export_catches_a_file_that_computes_something_else(vit, tmp_path):
    path = str(tmp_path / "vit.onnx")
    onnx_export.export_keras_model(vit, path)
    other = et._architecture()
    other.set_weights([w * 1.5 for w in vit.get_weights()])
    with pytest.raises(onnx_packages.ExportError, match="differ from the Keras model's by"):
        onnx_check.check_file(path, onnx_export.prepare(other))


@needs_onnx
@pytest.mark.parametrize("case", sorted(et.OUTPUT_CASES))
def test_exported_file_follows_models_of_any_output(case, tmp_path):
    """Softmax (no second one: no logits to take it from), 1 and 4 channels,
    features and a feature map, named for what they are."""
    _, _, output, shape = et.OUTPUT_CASES[case]
    model = et.output_case_model(case)
    path = str(tmp_path / f"{case}.onnx")
    exported = onnx_export.export_keras_model(model, path)
    assert exported["outputs"] == [output]
    assert exported["input"]["shape"] == [1, 16, 16, model.channels]
    classifier = onnx_runtime.ONNXClassifier(path)
    assert classifier.output_name == output
    pixels = et.random_pixels(6, (16, 16), model.channels)
    expected = et.keras_outputs(model, pixels)
    assert expected.shape == (6, *shape)
    scale = max(1.0, float(np.abs(expected).max()))
    np.testing.assert_allclose(classifier.predict(pixels), expected, atol=LOGIT_RTOL * scale)


def test_models_that_cannot_be_exported_are_refused_naming_why():
    inputs = keras.Input((None, None, 3), name="image")
    logits = keras.layers.Dense(et.NUM_CLASSES)(keras.layers.GlobalAveragePooling2D()(inputs))
    model = keras.Model(inputs, logits, name="any_size")
    with pytest.raises(
        onnx_packages.ExportError,
        match=r"'any_size' takes images of any size \(input size None x None\); the ONNX "
        r"file is written at one fixed H x W: build the model at a fixed size for export",
    ):
        onnx_export.prepare(model)
    images = keras.Input((8, 8, 3), name="image")
    pooled = keras.layers.GlobalAveragePooling2D()(images)
    two = keras.Model(images, [pooled, pooled], name="two_outputs")
    with pytest.raises(onnx_packages.ExportError, match="'two_outputs' has 1 inputs and 2 outputs"):
        onnx_export.prepare(two)


def test_an_unknown_precision_is_refused(vit):
    with pytest.raises(
        onnx_packages.ExportError, match="precision='int8': expected one of float32, float16"
    ):
        onnx_export.prepare(vit, "int8")


def test_a_missing_dependency_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tf2onnx", None)  # `import tf2onnx` raises ImportError
    with pytest.raises(
        onnx_packages.ExportError,
        match=r"needs tf2onnx \(not installed\): `pip install -e '\.\[onnx\]'`",
    ):
        onnx_export.export_keras_model(et._architecture(), str(tmp_path / "x.onnx"))
    assert not (tmp_path / "x.onnx").exists()


@needs_onnx
def test_cli_run_dir_with_report(vit, tmp_path):
    run_dir = et.write_run_dir(vit, str(tmp_path / "run"), et.CLASS_NAMES)
    output, report_path = tmp_path / "vit.onnx", tmp_path / "report.json"
    result = et.run_tool(
        [
            "tools/export_onnx.py",
            f"--run_dir={run_dir}",
            "--dynamic_batch",
            f"--output={output}",
            f"--report={report_path}",
            "--num_eval_images=100",
            "--latency_repeats=20",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"Wrote {output} ("), result.stdout[:500]  # ours first
    assert "tf2onnx" not in result.stderr and "Saved artifact" not in result.stdout
    written = json.loads(report_path.read_text())
    assert written["file_size_bytes"] == output.stat().st_size
    assert written["op_counts"] == onnx_file.operator_counts(str(output))
    assert written["standard_ops_only"] is True and written["reference"] == "keras"
    assert written["precision"] == "float32" and written["dynamic_batch"] is True
    assert written["input"] == {"shape": [None, 28, 28, 3], "dtype": "float32"}
    assert written["outputs"] == ["logits", "probabilities"]

    pixels, labels = et.fashion_mnist(100)
    expected = et.keras_probabilities(vit, pixels)
    produced = onnx_runtime.ONNXClassifier(str(output)).predict(pixels)
    assert written["num_images"] == 100
    assert written["top1_agreement"] == pytest.approx(
        np.mean(produced.argmax(1) == expected.argmax(1))
    )
    assert written["max_abs_delta_probability"] == pytest.approx(
        np.abs(produced - expected).max(), abs=1e-6
    )
    # The softmax at most halves a logit error: |dp_i| <= 2 p_i (1 - p_i) max|dz| <= max|dz| / 2.
    scale = max(1.0, float(np.abs(_keras_logits(vit, pixels)).max()))
    assert written["max_abs_delta_probability"] <= 0.5 * LOGIT_RTOL * scale
    assert written["reference_accuracy"] == pytest.approx(np.mean(expected.argmax(1) == labels))
    assert written["onnx_accuracy"] == pytest.approx(np.mean(produced.argmax(1) == labels))
    assert "tflite_accuracy" not in written  # the accuracy is named after the runtime
    for timing in [*written["latency_per_image"].values(), written["keras_latency_per_image"]]:
        assert timing["repeats"] == 20 and 0 < timing["median_ms"] < 1000
    assert set(written["latency_per_image"]) == {"1_threads", "2_threads"}


@needs_onnx
def test_cli_refuses_a_model_without_weights(tmp_path):
    result = et.run_tool(
        ["tools/export_onnx.py", "--model=ViT_Ti16", f"--output={tmp_path / 'x.onnx'}"]
    )
    assert result.returncode != 0
    assert "--model=ViT_Ti16 needs --weights" in result.stderr
