"""OpenVINO export of a keras_vit model: an OpenVINO IR (`.xml` graph + `.bin`
weights) written from the Keras model through Keras' own exporter
(`keras.Model.export(path, format="openvino")`), from a SavedModel of
tools/export_savedmodel.py, or from an ONNX file of tools/export_onnx.py
(`openvino.convert_model` reads both), and checked with OpenVINO's CPU plugin
(deploy/openvino_runtime.py) against what it was converted from.

The file takes `images` (batch, H, W, C) float32 pixels in [0, 255], the batch
axis dynamic, and returns what the ONNX file returns (deploy/onnx_file.py: a
classifier ending in logits `logits` and `probabilities`); converted from a
SavedModel, its `<prefix>_images_float32` signature's main output alone.

Precisions (`PRECISIONS`):
- 'float32': float32 weights, computed in float32. The file pins OpenVINO's
  inference precision to f32 (`RUNTIME_PRECISION_KEY` in its rt_info): on a CPU
  with AVX-512-BF16 or AMX OpenVINO otherwise computes in bfloat16 by default
  (measured on AMD Zen 4 with openvino 2026.4).
- 'bfloat16': the same float32 weights, computed in bfloat16 where the CPU has
  it (AVX-512-BF16 or AMX; elsewhere OpenVINO computes float32, and the report's
  `inference_precision` says so).
- 'int8_weights': nncf's int8 weight compression (asymmetric, per output
  channel); activations stay float32: a file of about a quarter the size.
- 'int8': nncf's post-training quantisation of weights and activations,
  calibrated on images (`CALIBRATED`), run by int8 kernels (VNNI / AMX-INT8);
  weights in half the int8 range, so that CPUs without VNNI do not saturate.

Needs the `openvino` extra (openvino; nncf for the int8 precisions):
pip install -e '.[openvino]'.
"""

import logging
import os
import tempfile

import numpy as np

from keras_vit_deploy import require_tensorflow_backend, serving
from keras_vit_deploy.onnx_check import probe_pixels
from keras_vit_deploy.onnx_file import INPUT_NAME
from keras_vit_deploy.openvino_packages import RUNTIME_PRECISION_KEY, ExportError, require
from keras_vit_deploy.openvino_runtime import OpenVINOClassifier

PRECISIONS = ("float32", "bfloat16", "int8_weights", "int8")
CALIBRATED = ("int8",)
# OpenVINO's INFERENCE_PRECISION_HINT each precision computes under.
INFERENCE_PRECISIONS = {"float32": "f32", "bfloat16": "bf16", "int8_weights": "f32", "int8": "f32"}
# Max |delta| of the main output against the source on the probe images, relative to
# max(1, max |value|): as onnx_check.CHECK_BOUNDS, a check that the conversion computes
# the model, not a precision target (tests/test_export_openvino.py measures that).
# bfloat16 rounds to 8 significant bits (2**-9 relative), 8x float16's 11; int8 steps are
# 1/255 of a calibrated range.
CHECK_BOUNDS = {"float32": 1e-4, "bfloat16": 0.25, "int8_weights": 0.1, "int8": 0.5}


def _check_precision(precision, calibration):
    if precision not in PRECISIONS:
        raise ExportError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}.")
    if precision in CALIBRATED and (calibration is None or not len(calibration)):
        raise ExportError(
            f"precision={precision!r} quantises activations: it needs calibration "
            "images (--representative_data=TFRECORD_GLOB)."
        )


def keras_to_openvino(model):
    """The OpenVINO model (float32) of a keras_vit model, through Keras' exporter,
    of the model that the ONNX export prepares (`onnx_export.prepare`: the pixel
    scaling inside, its outputs named), at a dynamic batch."""
    import tensorflow as tf

    from keras_vit_deploy import onnx_export  # prepare() needs no ONNX package

    require_tensorflow_backend()
    ov = require("openvino")
    prepared = onnx_export.prepare(model, "float32", dynamic_batch=True)
    shape = prepared.inputs[0].shape
    spec = tf.TensorSpec([None, *shape[1:]], tf.float32, INPUT_NAME)
    with tempfile.TemporaryDirectory(prefix="keras_vit_openvino_") as folder:
        path = os.path.join(folder, "model.xml")
        try:
            prepared.export(path, format="openvino", verbose=False, input_signature=[spec])
        except Exception as e:  # the TF frontend raises many kinds; the message matters
            raise ExportError(
                f"Keras' OpenVINO exporter (openvino {ov.__version__}) could not convert "
                f"model '{model.name}': {type(e).__name__}: {e}"
            ) from e
        converted = ov.Core().read_model(path)
    return converted, prepared


def saved_model_to_openvino(directory):
    """The OpenVINO model of a SavedModel's `<prefix>_images_float32` signature,
    returning its main output alone (the top_k outputs stay with TF Serving)."""
    import tensorflow as tf

    ov = require("openvino")
    loaded = tf.saved_model.load(directory)
    served = serving.loaded_signatures(loaded)
    signature = loaded.signatures[served.images_float32]

    @tf.function(
        input_signature=[
            tf.TensorSpec([None, *served.image_size, served.channels], tf.float32, INPUT_NAME)
        ]
    )
    def main_output(images):
        return {served.output: signature(images=images)[served.output]}

    converted = ov.convert_model(main_output.get_concrete_function())
    _name_tensors(converted)
    return converted, lambda pixels: signature(images=tf.constant(pixels))[served.output].numpy()


def onnx_to_openvino(path):
    """The OpenVINO model of an ONNX file of tools/export_onnx.py, its outputs and
    batch kept (1, or dynamic with --dynamic_batch: tf2onnx bakes the batch into
    the attention's reshapes)."""
    return require("openvino").convert_model(os.fspath(path))


def _name_tensors(converted):
    """Names the input `images` (a tf.function's is named after its argument, with
    a suffix)."""
    converted.inputs[0].get_tensor().set_names({INPUT_NAME})


def compress(converted, precision, calibration=None):
    """`converted` (float32, modified in place where nncf does so) at `precision`,
    with its inference precision written into the file's rt_info."""
    _check_precision(precision, calibration)
    if precision in ("int8_weights", "int8"):
        require("nncf").set_log_level(logging.WARNING)  # not its statistics tables
    if precision == "int8_weights":
        converted = require("nncf").compress_weights(converted)
    elif precision == "int8":
        converted = quantize(converted, calibration)
    converted.set_rt_info(INFERENCE_PRECISIONS[precision], RUNTIME_PRECISION_KEY)
    return converted


def quantize(converted, calibration):
    """nncf's post-training quantisation of `converted` on `calibration` pixels
    (N, H, W, C), for transformers (the softmax and LayerNorm kept float).

    SmoothQuant is off: on the tests' briefly trained tiny ViT it took top-1
    agreement with float32 from 0.985 to 0.39 (nncf 3.4, 200 calibration images).

    Every matmul's weights use half the int8 range (nncf's overflow fix on all
    layers, not its default of the first): a CPU without VNNI or AMX (AVX2, or
    AVX-512 without VNNI) adds u8 x s8 pairs in int16 and saturates, and the file
    does not know which CPU will run it. On AMD EPYC family 23 (AVX2 only) the
    tests' tiny ViT went from max |delta probability| 0.122 and top-1 agreement
    0.93 (first layer only) to 0.036 and 0.97 (nncf 3.4, openvino 2026.4)."""
    nncf = require("nncf")
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
        OverflowFix,
    )

    pixels = np.asarray(calibration, np.float32)
    return nncf.quantize(
        converted,
        nncf.Dataset([pixels[i : i + 1] for i in range(len(pixels))]),
        model_type=nncf.ModelType.TRANSFORMER,
        subset_size=len(pixels),
        advanced_parameters=AdvancedQuantizationParameters(
            overflow_fix=OverflowFix.ENABLE,
            smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=-1),
        ),
    )


def save(converted, path):
    """Writes the IR: `path` (.xml) and its .bin beside it, weights as they are
    (OpenVINO's own default would compress float32 weights to float16)."""
    if not os.fspath(path).endswith(".xml"):
        raise ExportError(f"{path}: an OpenVINO model is written as FILE.xml (+ FILE.bin).")
    folder = os.path.dirname(os.fspath(path))
    if folder:
        os.makedirs(folder, exist_ok=True)
    require("openvino").save_model(converted, os.fspath(path), compress_to_fp16=False)


def check_file(path, reference, precision, image_size, channels):
    """Loads `path` with OpenVINO's CPU plugin and compares its main output with
    `reference` (float32 pixels -> the same output) on `onnx_check.probe_pixels`;
    ExportError unless they agree within `CHECK_BOUNDS[precision]`."""
    classifier = OpenVINOClassifier(path)
    pixels = probe_pixels(image_size, channels=channels)
    expected = np.asarray(reference(pixels), np.float32)
    produced = classifier.predict(pixels)
    delta = float(np.abs(produced - expected).max()) if produced.shape == expected.shape else None
    bound = CHECK_BOUNDS[precision] * max(1.0, float(np.abs(expected).max()))
    if delta is None or not np.isfinite(produced).all() or not delta <= bound:
        found = f"by {delta:.3g}" if delta is not None else f"in shape {produced.shape}"
        raise ExportError(
            f"{path}: OpenVINO's {classifier.output_name} differ from the source's "
            f"{found} on the probe images (at most {bound:.3g} expected at "
            f"{precision}): the conversion does not compute the model."
        )
    return {
        "input": classifier.input,
        "outputs": classifier.output_names,
        "check": {
            "probe_images": len(pixels),
            "output": classifier.output_name,
            "max_abs_delta": delta,
            "bound": bound,
        },
    }


def export_keras_model(model, path, precision="float32", calibration=None):
    """Writes `model` (a keras_vit model, `serving.model_outputs` accepts it) as
    the OpenVINO IR `path` at `precision` (`calibration`: pixels (N, H, W, C) for
    'int8') and checks it against the Keras model; returns `check_file`'s dict."""
    _check_precision(precision, calibration)
    spec = serving.model_outputs(model, "the OpenVINO file", ExportError)
    converted, prepared = keras_to_openvino(model)
    save(compress(converted, precision, calibration), path)
    main = "probabilities" if spec.softmax else spec.name

    def reference(pixels):
        return np.asarray(prepared(pixels, training=False)[main])

    return check_file(path, reference, precision, spec.image_size, spec.channels)


def export_saved_model(directory, path, precision="float32", calibration=None):
    """As `export_keras_model`, from a SavedModel of tools/export_savedmodel.py."""
    _check_precision(precision, calibration)
    converted, reference = saved_model_to_openvino(directory)
    save(compress(converted, precision, calibration), path)
    shape = list(converted.inputs[0].partial_shape)
    size, channels = (shape[1].get_length(), shape[2].get_length()), shape[3].get_length()
    return check_file(path, reference, precision, size, channels)


def export_onnx_file(onnx_path, path, precision="float32", calibration=None):
    """As `export_keras_model`, from an ONNX file of tools/export_onnx.py, checked
    against onnxruntime on it."""
    from keras_vit_deploy.onnx_runtime import ONNXClassifier

    _check_precision(precision, calibration)
    converted = onnx_to_openvino(onnx_path)
    save(compress(converted, precision, calibration), path)
    source = ONNXClassifier(onnx_path)
    return check_file(path, source.predict, precision, source.image_size, source.channels)
