"""OpenVINO files (tools/export_openvino.py, deploy/openvino_*.py): a tiny ViT
exported from the Keras model, from its SavedModel and from its ONNX file and run
by OpenVINO's CPU plugin on real Fashion-MNIST images follows its source, at
float32 as closely as the ONNX file does, at the reduced precisions within bounds
derived from them; the file keeps its precision; a missing dependency and bad
flags are refused with the reason; the CLI's report."""

import importlib.util
import json
import sys

import export_testing as et
import keras
import numpy as np
import pytest
from test_export_onnx import LOGIT_RTOL

from keras_vit_deploy import (
    onnx_export,
    onnx_packages,
    openvino_export,
    openvino_packages,
    openvino_runtime,
    serving,
)

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the export builds TensorFlow graphs"
)
needs_openvino = pytest.mark.skipif(
    not (importlib.util.find_spec("openvino") and importlib.util.find_spec("nncf")),
    reason=f"needs openvino and nncf: {openvino_packages.INSTALL_COMMAND}",
)
needs_onnx = pytest.mark.skipif(
    not all(importlib.util.find_spec(name) for name in onnx_packages.REQUIRED),
    reason=f"needs tf2onnx, onnxruntime and onnx: {onnx_packages.INSTALL_COMMAND}",
)

NUM_IMAGES = 200
# Reduced precisions against float32 Keras: max |delta probability| on NUM_IMAGES
# of the briefly trained tiny model (et.assert_probabilities_follow). float16 (11
# significant bits) is asked 1e-2 by the TFLite and ONNX tests; bfloat16 keeps 8
# bits, a rounding 2**3 = 8x float16's, so its probabilities may move 8x as far
# (8e-2). int8 weights (per output channel, 1/255 of a channel's range) as
# TFLite's dynamic_int8 (0.05); int8 weights and activations (per tensor,
# calibrated) as TFLite's full int8 (0.1). A precision the CPU does not have is
# computed in float32, within these too.
MAX_DELTA = {
    "bfloat16": 8e-2,
    "int8_weights": 0.05,
    "int8": 0.1,
}
CALIBRATION = slice(NUM_IMAGES, 2 * NUM_IMAGES)  # test images the comparison does not use


@pytest.fixture(scope="module")
def vit():
    return et.tiny_classifier()


@pytest.fixture(scope="module")
def images():
    pixels, labels = et.fashion_mnist(2 * NUM_IMAGES)
    return pixels[:NUM_IMAGES], labels[:NUM_IMAGES], pixels[CALIBRATION]


def _keras_logits(model, pixels):
    return model.predict(np.asarray(pixels, np.float32) / 127.5 - 1.0, verbose=0)


def _assert_float32_follows(classifier, model, pixels, logits=True):
    expected = _keras_logits(model, pixels)
    scale = max(1.0, float(np.abs(expected).max()))
    assert scale < 10  # logits of O(1), as LOGIT_RTOL assumes
    if logits:
        np.testing.assert_allclose(
            classifier.logits(pixels), expected, rtol=0, atol=LOGIT_RTOL * scale
        )
    # The softmax at most halves a logit error: |dp_i| <= max|dz| / 2.
    probabilities = et.keras_probabilities(model, pixels)
    np.testing.assert_allclose(
        classifier.predict(pixels), probabilities, rtol=0, atol=0.5 * LOGIT_RTOL * scale
    )


def _int8_constants(path):
    """The int8 constants (weights) of the OpenVINO file at `path`."""
    import openvino

    model = openvino.Core().read_model(path)
    return [
        op.get_data()
        for op in model.get_ops()
        if op.get_type_name() == "Constant" and op.get_element_type() == openvino.Type.i8
    ]


@needs_openvino
def test_float32_file_follows_the_keras_model_at_any_batch(vit, images, tmp_path):
    pixels, _, _ = images
    path = str(tmp_path / "vit.xml")
    exported = openvino_export.export_keras_model(vit, path)
    assert exported["input"] == {"name": "images", "shape": [None, 28, 28, 3], "dtype": "float32"}
    assert exported["outputs"] == ["logits", "probabilities"]
    assert (tmp_path / "vit.bin").stat().st_size >= 4 * vit.count_params()  # float32 weights
    classifier = openvino_runtime.OpenVINOClassifier(path)
    # Pinned to float32 by the file, also where OpenVINO would default to bfloat16.
    assert classifier.runtime_facts()["inference_precision"] == "float32"
    _assert_float32_follows(classifier, vit, pixels)
    # Compiled at a static batch of 8: 200 images in 25 batches; 13 pad the last one.
    batched = openvino_runtime.OpenVINOClassifier(path, num_threads=1, batch_size=8)
    _assert_float32_follows(batched, vit, pixels[:13])


@needs_openvino
@pytest.mark.parametrize("precision", sorted(MAX_DELTA))
def test_reduced_precisions_within_their_bounds(precision, vit, images, tmp_path):
    pixels, _, calibration = images
    path = str(tmp_path / f"{precision}.xml")
    openvino_export.export_keras_model(vit, path, precision, calibration)
    classifier = openvino_runtime.OpenVINOClassifier(path)
    expected = et.keras_probabilities(vit, pixels)
    produced = classifier.predict(pixels)
    et.assert_probabilities_follow(produced, expected, MAX_DELTA[precision])
    computed = classifier.inference_precision()
    assert computed == ("bfloat16" if precision == "bfloat16" else "float32") or (
        precision == "bfloat16" and computed == "float32"  # a CPU without bfloat16
    )
    if precision == "bfloat16":
        assert np.abs(produced - expected).max() > 0  # not float32 in disguise
    if precision.startswith("int8"):  # int8 weights: about a quarter of float32's
        assert (tmp_path / f"{precision}.bin").stat().st_size <= 0.4 * 4 * vit.count_params()
    if precision == "int8":  # half the int8 range: no int16 saturation without VNNI
        weights = _int8_constants(path)
        assert len(weights) >= 4 * 2  # a block's four matmuls, two blocks
        assert all(np.abs(w.astype(np.int32)).max() <= 64 for w in weights)
        assert all(np.abs(w.astype(np.int32)).max() >= 63 for w in weights)  # and used


@needs_openvino
def test_from_the_saved_model_and_the_onnx_file(vit, images, tmp_path):
    pixels, _, _ = images
    directory = str(tmp_path / "saved")
    serving.export_saved_model(vit, directory)
    path = str(tmp_path / "from_saved.xml")
    exported = openvino_export.export_saved_model(directory, path)
    assert exported["outputs"] == ["probabilities"]  # the signature's main output alone
    _assert_float32_follows(openvino_runtime.OpenVINOClassifier(path), vit, pixels, logits=False)
    if not all(importlib.util.find_spec(name) for name in onnx_packages.REQUIRED):
        return
    onnx_path = str(tmp_path / "vit.onnx")
    onnx_export.export_keras_model(vit, onnx_path)
    path = str(tmp_path / "from_onnx.xml")
    exported = openvino_export.export_onnx_file(onnx_path, path)
    assert exported["input"]["shape"] == [1, 28, 28, 3]  # the ONNX file's batch kept
    _assert_float32_follows(openvino_runtime.OpenVINOClassifier(path), vit, pixels)


@needs_openvino
def test_the_check_after_export_catches_a_file_that_computes_something_else(vit, tmp_path):
    path = str(tmp_path / "vit.xml")
    openvino_export.export_keras_model(vit, path)
    with pytest.raises(openvino_packages.ExportError, match="differ from the source's by"):
        openvino_export.check_file(
            path, lambda p: et.keras_probabilities(vit, p[..., ::-1] * 0.5), "float32", (28, 28), 3
        )


# The rotary families' OUTPUT_CASES (DINOv3's rotary embeddings, storage tokens and a
# softmax head; EVA-02's SwiGLU with RoPE-ViT's learned frequencies and qk-norm, its
# features), as the SavedModel, TFLite and ONNX tests export every case.
ROTARY_CASES = sorted(case for case, spec in et.OUTPUT_CASES.items() if spec[0].get("rope"))


@needs_openvino
@pytest.mark.parametrize("case", ROTARY_CASES)
def test_rotary_families_export_within_their_parity_check(case, tmp_path):
    """The file's own check (its parity report: OpenVINO's main output against the
    Keras model's on the probe images, `check_file`) passes at float32, and the file
    follows the Keras model on other pixels within the ONNX file's bound."""
    _, _, output, shape = et.OUTPUT_CASES[case]
    model = et.output_case_model(case)
    path = str(tmp_path / f"{case}.xml")
    exported = openvino_export.export_keras_model(model, path)
    assert exported["outputs"] == [output]
    check = exported["check"]
    assert check["output"] == output and check["probe_images"] > 0
    assert check["max_abs_delta"] <= check["bound"]
    pixels = et.random_pixels(6, (16, 16), model.channels)
    expected = et.keras_outputs(model, pixels)
    assert expected.shape == (6, *shape)
    scale = max(1.0, float(np.abs(expected).max()))
    produced = openvino_runtime.OpenVINOClassifier(path).predict(pixels)
    np.testing.assert_allclose(produced, expected, rtol=0, atol=LOGIT_RTOL * scale)


def test_bad_precisions_and_a_missing_dependency_are_refused(vit, monkeypatch, tmp_path):
    with pytest.raises(openvino_packages.ExportError, match="precision='int4': expected one of"):
        openvino_export.export_keras_model(vit, str(tmp_path / "x.xml"), "int4")
    with pytest.raises(openvino_packages.ExportError, match="needs calibration images"):
        openvino_export.export_keras_model(vit, str(tmp_path / "x.xml"), "int8")
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError
    with pytest.raises(
        openvino_packages.ExportError,
        match=r"needs openvino \(not installed\): `pip install -e '\.\[openvino\]'`",
    ):
        openvino_export.export_keras_model(vit, str(tmp_path / "x.xml"))
    assert not (tmp_path / "x.xml").exists()


@needs_openvino
def test_cli_run_dir_with_report(vit, tmp_path):
    run_dir = et.write_run_dir(vit, str(tmp_path / "run"), et.CLASS_NAMES)
    output, report_path = tmp_path / "vit.xml", tmp_path / "report.json"
    result = et.run_tool(
        [
            "tools/export_openvino.py",
            f"--run_dir={run_dir}",
            f"--output={output}",
            f"--report={report_path}",
            "--num_eval_images=100",
            "--latency_repeats=20",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"Wrote {output} + vit.bin ("), result.stdout[:500]
    assert "Recommended runtime" in result.stdout.splitlines()[1]
    written = json.loads(report_path.read_text())
    assert written["precision"] == "float32" and written["reference"] == "keras"
    assert written["inference_precision"] == "float32"
    assert written["input"] == {"shape": [None, 28, 28, 3], "dtype": "float32"}
    assert written["weights_bytes"] == (tmp_path / "vit.bin").stat().st_size
    pixels, labels = et.fashion_mnist(100)
    expected = et.keras_probabilities(vit, pixels)
    produced = openvino_runtime.OpenVINOClassifier(str(output)).predict(pixels)
    assert written["num_images"] == 100
    assert written["top1_agreement"] == pytest.approx(
        np.mean(produced.argmax(1) == expected.argmax(1))
    )
    scale = max(1.0, float(np.abs(_keras_logits(vit, pixels)).max()))
    assert written["max_abs_delta_probability"] <= 0.5 * LOGIT_RTOL * scale
    assert written["openvino_accuracy"] == pytest.approx(np.mean(produced.argmax(1) == labels))
    for timing in written["latency_per_image"].values():
        assert timing["repeats"] == 20 and 0 < timing["median_ms"] < 1000
    assert set(written["latency_per_image"]) == {"1_threads", "2_threads"}


@needs_openvino
def test_cli_refuses_two_sources_and_int8_without_calibration(tmp_path):
    result = et.run_tool(
        [
            "tools/export_openvino.py",
            f"--onnx={tmp_path / 'x.onnx'}",
            f"--saved_model={tmp_path}",
            f"--output={tmp_path / 'x.xml'}",
        ]
    )
    assert result.returncode != 0
    assert "give one of --saved_model, --onnx, --run_dir or --model" in result.stderr
    result = et.run_tool(
        [
            "tools/export_openvino.py",
            f"--saved_model={tmp_path}",
            "--precision=int8",
            f"--output={tmp_path / 'x.xml'}",
        ]
    )
    assert result.returncode != 0
    assert "--precision=int8 needs --representative_data=TFRECORD_GLOB" in result.stderr
