"""ONNX export of a keras_vit model through Keras' own exporter
(`keras.Model.export(path, format="onnx")`: tf2onnx under the TensorFlow backend),
checked with onnxruntime against the Keras model (deploy/onnx_check.py).

The file's input and outputs are deploy/onnx_file.py's. The model's input
normalisation (`keras_vit.preprocessing.scale_offset` of its `preprocessing`: the
authors' x / PIXEL_SCALE - 1, or a timm / transformers mean and std) happens inside
the file, as in the SavedModel and the TFLite files. Our code only prepares the Keras model that
is exported (rebuilt at the precision asked with the same weights, behind the
scaling, with those outputs, called once) and checks the file that Keras writes.

Precisions: 'float32'; 'float16': the model rebuilt under Keras' 'mixed_float16'
policy (float16 weights and matmuls; LayerNorm, softmax and the head in float32,
where Keras keeps them), exported as it is; onnxruntime's CPU provider runs it;
'int8_dynamic': the float32 file through onnxruntime's dynamic quantisation
(`quantize_int8_dynamic`: int8 weights of the MatMuls, activations quantised per
call), the serving path benchmarks/serving_cpu.py measures as onnx_int8_dynamic.

Needs the `onnx` extra (tf2onnx, onnxruntime, onnx): pip install -e '.[onnx]'.
"""

import os
import tempfile
import warnings

import keras
import numpy as np
import tensorflow as tf

from keras_vit.preprocessing import scale_offset
from keras_vit_deploy import require_tensorflow_backend, serving
from keras_vit_deploy.onnx_check import check_file
from keras_vit_deploy.onnx_file import INPUT_NAME, output_names
from keras_vit_deploy.onnx_packages import ExportError, require_packages

PRECISIONS = ("float32", "float16", "int8_dynamic")
# The Keras dtype policy each precision is exported under (int8_dynamic: the
# float32 file, quantised after).
POLICIES = {"float32": "float32", "float16": "mixed_float16", "int8_dynamic": "float32"}


def _outputs(model, precision="float32"):
    """`serving.model_outputs` of an exportable model; ExportError otherwise."""
    if precision not in PRECISIONS:
        raise ExportError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}.")
    return serving.model_outputs(model, "the ONNX file", ExportError)


def at_policy(model, policy):
    """`model` itself if it computes under dtype policy `policy`, else the same
    architecture rebuilt under it (from its config) with its weights."""
    if model.dtype_policy.name == policy:
        return model
    try:
        rebuilt = type(model).from_config({**model.get_config(), "dtype": policy})
    except (NotImplementedError, TypeError, ValueError) as e:
        raise ExportError(
            f"model '{model.name}' computes under the "
            f"'{model.dtype_policy.name}' policy and cannot be rebuilt under "
            f"'{policy}' from its config: {e}"
        ) from e
    rebuilt.set_weights(model.get_weights())
    return rebuilt


def prepare(model, precision="float32", dynamic_batch=False):
    """The Keras model that is exported: `model` at `precision`'s policy behind
    the pixel scaling, with the outputs `onnx_file.output_names` lists
    ({'logits', 'probabilities'} for a classifier ending in logits), called once
    (Keras' exporter refuses a model that has never run)."""
    require_tensorflow_backend()
    spec = _outputs(model, precision)
    source = at_policy(model, POLICIES[precision])
    images = keras.Input(
        (*spec.image_size, spec.channels),
        batch_size=None if dynamic_batch else 1,
        name=INPUT_NAME,
        dtype="float32",
    )
    # The file's outputs are named by the dict's keys; the layers get a prefix so
    # that none can clash with the wrapped model's own name.
    scale, offset = scale_offset(getattr(model, "preprocessing", None))
    scaled = keras.layers.Rescaling(
        scale, offset=offset, name="onnx_scale_pixels", dtype="float32"
    )(images)
    first = output_names(spec)[0]
    value = keras.layers.Activation("linear", name=f"onnx_{first}", dtype="float32")(
        source(scaled, training=False)
    )
    outputs = {first: value}
    if spec.softmax:
        outputs["probabilities"] = keras.layers.Softmax(name="onnx_probabilities", dtype="float32")(
            value
        )
    prepared = keras.Model(images, outputs, name=f"{model.name}_onnx")
    prepared(np.zeros((1, *spec.image_size, spec.channels), np.float32), training=False)
    return prepared


def export_keras_model(model, path, precision="float32", dynamic_batch=False, opset=None):
    """Writes `model` (a keras_vit model) to the ONNX file `path` and checks it.

    Args:
        model: a Keras model taking (batch, H, W, C) images in [-1, 1] at a fixed
            size and returning logits, probabilities or scores (batch, K),
            features (batch, D) or a feature map (batch, rows, cols, D)
            (`serving.model_outputs`).
        path: the .onnx file to write.
        precision: one of PRECISIONS.
        dynamic_batch: a dynamic batch axis (else batch 1, as the TFLite files).
        opset: the ONNX opset (None: tf2onnx's default).
    Returns:
        `onnx_check.check_file`'s {'input': {name, shape, dtype}, 'outputs': [...],
        'opset': N, 'check': {...}} (dynamic axes as None); raises ExportError
        naming what failed.
    """
    modules = require_packages()
    register_erfc()
    prepared = prepare(model, precision, dynamic_batch)
    outputs = _outputs(model, precision)
    spec = tf.TensorSpec(
        [None if dynamic_batch else 1, *outputs.image_size, outputs.channels],
        tf.float32,
        INPUT_NAME,
    )
    if precision == "int8_dynamic":
        with tempfile.TemporaryDirectory(prefix="keras_vit_onnx_") as folder:
            float32 = os.path.join(folder, "float32.onnx")
            _export(prepared, float32, spec, opset, modules, model.name, precision)
            quantize_int8_dynamic(float32, path)
    else:
        _export(prepared, path, spec, opset, modules, model.name, precision)
    return check_file(path, prepared, precision, dynamic_batch)


def _export(prepared, path, spec, opset, modules, name, precision):
    with warnings.catch_warnings():  # Keras' numpy-2 patch of tf2onnx touches np.object
        warnings.simplefilter("ignore", FutureWarning)
        try:
            prepared.export(
                path, format="onnx", verbose=False, input_signature=[spec], opset_version=opset
            )
        except Exception as e:  # tf2onnx raises many kinds; the message is what matters
            raise ExportError(
                f"Keras' ONNX exporter (tf2onnx {modules['tf2onnx'].__version__}) could not "
                f"convert model '{name}' at {precision}: {type(e).__name__}: {e}"
            ) from e


def quantize_int8_dynamic(float32_path, path):
    """Writes `path`, the float32 ONNX file `float32_path` with onnxruntime's dynamic
    quantisation (`onnxruntime.quantization.quantize_dynamic`, int8 weights: QInt8):
    weights stored as int8, activations quantised per call from their range. Needs
    no calibration images. ExportError naming the file when onnxruntime fails."""
    require_packages()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    try:
        quantize_dynamic(float32_path, path, weight_type=QuantType.QInt8)
    except Exception as e:  # onnxruntime raises many kinds; the message is what matters
        raise ExportError(
            f"onnxruntime could not quantise {float32_path} to int8: {type(e).__name__}: {e}"
        ) from e


_ERFC_REGISTERED = []


def register_erfc():
    """Teaches tf2onnx TensorFlow's `Erfc`, as 1 - Erf (ONNX's Erf, opset 9 on).

    Workaround, fenced here: the exact GELU (`keras.activations.gelu(x, approximate=False)`,
    the MLPs of every timm and transformers ViT: DeiT III, DINOv2, CLIP with GELU) is
    0.5 x erfc(-x / sqrt(2)) under TensorFlow, and tf2onnx 1.17 has no handler for
    Erfc: the export failed with "Unsupported ops: Counter({'Erfc': 1})". 1 - erf(z)
    loses only the bits of erfc(z) below float32's resolution at 1 (~6e-8), where the
    GELU's value is x times that. tests/test_export_onnx.py exports the families' cases.
    """
    if _ERFC_REGISTERED:
        return
    from tf2onnx import utils
    from tf2onnx.handler import tf_op

    @tf_op("Erfc")
    class Erfc:
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            x = node.input[0]
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(x))
            one = ctx.make_const(utils.make_name("erfc_one"), np.array(1, dtype))
            erf = ctx.make_node("Erf", [x], op_name_scope=node.name, name="erf")
            shapes, dtypes = node.output_shapes, node.output_dtypes
            ctx.remove_node(node.name)
            ctx.make_node(
                "Sub",
                [one.output[0], erf.output[0]],
                outputs=node.output,
                name=node.name,
                shapes=shapes,
                dtypes=dtypes,
            )

    _ERFC_REGISTERED.append(Erfc)
