"""TFLite conversion of an exported model, with builtin ops only.

The .tflite file is the SavedModel's `<prefix>_images_float32` signature reduced
to its main output: input `images` (1, H, W, C) pixels in [0, 255] (float32;
uint8 for full-integer int8 files), output what the SavedModel serves
(`deploy/serving.py`): `probabilities` (1, K) (or `scores` for a classifier
with another activation), `features` (1, D) or `feature_map` (1, rows, cols, D).
Scaling to [-1, 1] happens inside the file, as in the SavedModel.

Quantisations: 'none' (float32), 'float16' (float16 weights), 'dynamic_int8'
(int8 weights, dynamic-range activations), 'int8' (full integer: int8 weights
and activations calibrated on representative images, builtin int8 kernels only),
'int8_matmul' (the convolution and the fully connected layers in int8, weights
and calibrated activations; LayerNorm, attention's batch matmuls and softmax,
GELU and the residual adds stay float32, where int8 kernels are slow and lossy:
see benchmarks/tflite_ops.py).
"""

import collections
import tempfile

import numpy as np
import tensorflow as tf

from keras_vit_deploy import serving

QUANTIZATIONS = ("none", "float16", "dynamic_int8", "int8", "int8_matmul")
# Quantisations whose activation ranges are calibrated on representative images.
CALIBRATED = ("int8", "int8_matmul")
# The operators 'int8_matmul' quantises; every other kind stays float32.
INT8_MATMUL_OPS = ("CONV_2D", "FULLY_CONNECTED")

try:
    from ai_edge_litert import schema_py_generated as _schema
except ImportError:  # TensorFlow ships the same generated schema
    from tensorflow.lite.python import schema_py_generated as _schema

_BUILTIN_NAMES = {
    code: name for name, code in vars(_schema.BuiltinOperator).items() if not name.startswith("_")
}


class ConversionError(RuntimeError):
    """The model cannot be converted as asked, or the result is not builtin-only."""


def _output_function(loaded):
    """A concrete function (1, H, W, C) float32 pixels -> {main output} that
    calls the loaded SavedModel's `<prefix>_images_float32` signature."""
    served = serving.loaded_signatures(loaded)
    signature = loaded.signatures[served.images_float32]
    shape = [1, *served.image_size, served.channels]

    @tf.function(input_signature=[tf.TensorSpec(shape, tf.float32, "images")])
    def main_output(images):
        return {served.output: signature(images=images)[served.output]}

    return main_output.get_concrete_function()


def _representative_dataset(quantization, representative_pixels):
    """A generator function over the calibration images, one (1, H, W, C) each."""
    if representative_pixels is None or not len(representative_pixels):
        raise ConversionError(
            f"--quantization={quantization} needs representative images "
            "(--representative_data=TFRECORD_GLOB) to calibrate."
        )
    pixels = np.asarray(representative_pixels, np.float32)

    def representative_dataset():
        for image in pixels:
            yield [image[None]]

    return representative_dataset


def _configure(converter, quantization, representative_pixels):
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    if quantization == "none":
        return
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if quantization == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif quantization in CALIBRATED:
        converter.representative_dataset = _representative_dataset(
            quantization, representative_pixels
        )
        if quantization == "int8":
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
            converter.inference_input_type = tf.uint8


def _convert(converter, quantization, representative_pixels):
    """Runs `converter` configured for `quantization`.

    'int8_matmul' is selective quantisation (TFLite's QuantizationDebugger with
    every builtin operator kind but INT8_MATMUL_OPS denylisted)."""
    _configure(converter, quantization, representative_pixels)
    if quantization != "int8_matmul":
        return converter.convert()
    options = tf.lite.experimental.QuantizationDebugOptions(
        denylisted_ops=[kind for kind in _BUILTIN_NAMES.values() if kind not in INT8_MATMUL_OPS]
    )
    debugger = tf.lite.experimental.QuantizationDebugger(
        converter=converter, debug_dataset=converter.representative_dataset, debug_options=options
    )
    return debugger.get_nondebug_quantized_model()


def convert_saved_model(saved_model_dir, quantization="none", representative_pixels=None):
    """Converts an exported SavedModel (serving.export_saved_model) to TFLite.

    Args:
        saved_model_dir: the SavedModel directory.
        quantization: one of QUANTIZATIONS.
        representative_pixels: for CALIBRATED quantisations, (N, H, W, C)
            pixels in [0, 255] at the model's size and channels.
    Returns:
        the .tflite file's bytes; raises ConversionError if it holds a
        non-builtin (Flex or custom) op.
    """
    if quantization not in QUANTIZATIONS:
        raise ConversionError(
            f"quantization={quantization!r}: expected one of {', '.join(QUANTIZATIONS)}."
        )
    loaded = tf.saved_model.load(saved_model_dir)
    function = _output_function(loaded)
    if representative_pixels is not None:
        expected = tuple(function.inputs[0].shape[1:])
        shape = tuple(np.shape(representative_pixels))
        if len(shape) != 4 or shape[1:] != expected:
            raise ConversionError(
                f"representative images have shape {shape}; the model "
                f"takes (N, {', '.join(map(str, expected))})."
            )
    content = _convert(
        tf.lite.TFLiteConverter.from_concrete_functions([function], loaded),
        quantization,
        representative_pixels,
    )
    assert_builtin_only(content)
    return content


def convert_keras_model(model, quantization="none", representative_pixels=None):
    """Exports `model` as the serving SavedModel (in a temporary directory) and
    converts that: the .tflite file computes what the SavedModel serves."""
    with tempfile.TemporaryDirectory(prefix="keras_vit_export_") as directory:
        serving.export_saved_model(model, directory)
        return convert_saved_model(directory, quantization, representative_pixels)


def operator_counts(content):
    """{operator name: count} over all subgraphs of a .tflite file; custom ops
    appear as 'CUSTOM:<code>' (Flex ops as 'CUSTOM:Flex<Op>')."""
    model = _schema.Model.GetRootAs(bytearray(content), 0)
    names = []
    for i in range(model.OperatorCodesLength()):
        code = model.OperatorCodes(i)
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        if builtin == _schema.BuiltinOperator.CUSTOM:
            names.append("CUSTOM:" + (code.CustomCode() or b"?").decode())
        else:
            names.append(_BUILTIN_NAMES.get(builtin, f"UNKNOWN_{builtin}"))
    counts = collections.Counter()
    for s in range(model.SubgraphsLength()):
        subgraph = model.Subgraphs(s)
        for o in range(subgraph.OperatorsLength()):
            counts[names[subgraph.Operators(o).OpcodeIndex()]] += 1
    return dict(sorted(counts.items()))


def constant_bytes(content):
    """Bytes of constant data (weights, quantisation tables, shape constants)
    in a .tflite file: the part that quantisation shrinks."""
    model = _schema.Model.GetRootAs(bytearray(content), 0)
    return sum(model.Buffers(i).DataLength() for i in range(model.BuffersLength()))


def non_builtin_ops(counts):
    """The names in `operator_counts(...)` that are not TFLite builtins."""
    return [name for name in counts if name.startswith(("CUSTOM:", "UNKNOWN_"))]


def file_facts(content, quantization):
    """What the report (`report.build_report`) says of the .tflite bytes `content`,
    converted at `quantization`: its size, constants and operators."""
    counts = operator_counts(content)
    return {
        "quantization": quantization,
        "file_size_bytes": len(content),
        "constant_bytes": constant_bytes(content),
        "ops": sorted(counts),
        "op_counts": counts,
        "builtin_ops_only": not non_builtin_ops(counts),
    }


def assert_builtin_only(content):
    """Raises ConversionError naming any op that is not a TFLite builtin."""
    foreign = non_builtin_ops(operator_counts(content))
    if foreign:
        raise ConversionError(
            f"the converted model needs non-builtin ops: {', '.join(foreign)}"
            " (Flex/SELECT_TF_OPS are not allowed)."
        )
