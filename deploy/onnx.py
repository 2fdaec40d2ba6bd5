"""ONNX export of a keras_vit model through Keras' own exporter
(`keras.Model.export(path, format="onnx")`: tf2onnx under the TensorFlow backend),
run with onnxruntime and checked against the Keras model.

The file takes `images` (1, H, W, C), or (batch, H, W, C) with a dynamic batch
axis, float32 pixels in [0, 255], and returns what the model computes, named as
in the SavedModel (`deploy/serving.py`, `output_names`): a classifier ending in
logits `logits` (B, K) and `probabilities` (B, K) float32 (their softmax); one
with `classifier_activation='softmax'` its `probabilities` (no second softmax),
with another activation its `scores`; a headless model `features` (B, D) or
`feature_map` (B, rows, cols, D). Scaling to [-1, 1] (x / PIXEL_SCALE - 1, as
deploy/preprocessing.py) happens inside the file, as in the SavedModel and the
TFLite files. Our code only prepares the Keras model that is exported (rebuilt
at the precision asked with the same weights, behind the scaling, with those
outputs, called once) and checks the file that Keras writes: onnxruntime must
load it and follow the prepared model on probe images.

Precisions: 'float32'; 'float16': the model rebuilt under Keras' 'mixed_float16'
policy (float16 weights and matmuls; LayerNorm, softmax and the head in float32,
where Keras keeps them), exported as it is; onnxruntime's CPU provider runs it.

Needs the `onnx` extra (tf2onnx, onnxruntime, onnx): pip install -e '.[onnx]'.
"""

import collections
import importlib
import os
import warnings

import keras
import numpy as np
import tensorflow as tf
from keras_vit_deploy import require_tensorflow_backend, serving, timing
from keras_vit_deploy.preprocessing import scale_pixels

from keras_vit.preprocessing import PIXEL_SCALE

PRECISIONS = ("float32", "float16")
# The Keras dtype policy each precision is exported under.
POLICIES = {"float32": "float32", "float16": "mixed_float16"}
INPUT_NAME = "images"
OUTPUT_NAMES = ("logits", "probabilities")  # a classifier ending in logits (`output_names`)
REQUIRED = ("onnx", "onnxruntime", "tf2onnx")
INSTALL_COMMAND = "pip install -e '.[onnx]'"
RUNTIME = "onnxruntime"
# The check after export: max |delta| of the main output between onnxruntime and
# the prepared Keras model on the probe images, relative to the output's scale
# max(1, max |value|) (1 for probabilities; features after the final LayerNorm are
# O(1) to O(10)). Not a precision target (the report and tests/test_export_onnx.py
# measure that): a conversion that computes something else (a dropped op, a wrong
# constant) is off by far more. float32 runs the same arithmetic in another order
# (~1e-6 on these probabilities); float16 rounds activations to 11 bits in both
# runtimes, independently.
CHECK_BOUNDS = {"float32": 1e-4, "float16": 5e-2}
_STANDARD_DOMAINS = ("", "ai.onnx")


class ExportError(RuntimeError):
    """The model cannot be exported as asked, a package is missing, or the file
    does not follow the model; the message says which."""


def require_packages():
    """{name: module} of tf2onnx, onnxruntime and onnx; ExportError naming the
    missing ones and the command that installs them."""
    modules, missing = {}, []
    for name in REQUIRED:
        try:
            modules[name] = importlib.import_module(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ExportError(
            f"ONNX export needs {', '.join(missing)} (not installed): "
            f"`{INSTALL_COMMAND}` installs tf2onnx, onnxruntime and onnx."
        )
    return modules


def versions():
    """{package: version} of the packages the export and the runtime use."""
    return {
        name: getattr(module, "__version__", "?") for name, module in require_packages().items()
    }


def _outputs(model, precision="float32"):
    """`serving.model_outputs` of an exportable model; ExportError otherwise."""
    if precision not in PRECISIONS:
        raise ExportError(f"precision={precision!r}: expected one of {', '.join(PRECISIONS)}.")
    return serving.model_outputs(model, "the ONNX file", ExportError)


def output_names(spec):
    """The ONNX file's outputs for `serving.ModelOutputs` `spec`, in order."""
    return OUTPUT_NAMES if spec.softmax else (spec.name,)


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
    the pixel scaling, with the outputs `output_names` lists ({'logits',
    'probabilities'} for a classifier ending in logits), called once (Keras'
    exporter refuses a model that has never run)."""
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
    scaled = keras.layers.Rescaling(
        1 / PIXEL_SCALE, offset=-1.0, name="onnx_scale_pixels", dtype="float32"
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


def probe_pixels(image_size, count=4, seed=0, channels=3):
    """Deterministic float32 pixels (count, H, W, C) in [0, 255] for the check:
    black, white and uniform noise."""
    shape = (*image_size, channels)
    noise = np.random.default_rng(seed).uniform(0, 255, (max(count - 2, 0), *shape))
    return np.concatenate([np.zeros((1, *shape)), np.full((1, *shape), 255.0), noise])[
        :count
    ].astype(np.float32)


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
        {'input': {shape, dtype}, 'outputs': [...], 'opset': N, 'check': {...}}
        (dynamic axes as None); raises ExportError naming what failed.
    """
    modules = require_packages()
    prepared = prepare(model, precision, dynamic_batch)
    outputs = _outputs(model, precision)
    spec = tf.TensorSpec(
        [None if dynamic_batch else 1, *outputs.image_size, outputs.channels],
        tf.float32,
        INPUT_NAME,
    )
    with warnings.catch_warnings():  # Keras' numpy-2 patch of tf2onnx touches np.object
        warnings.simplefilter("ignore", FutureWarning)
        try:
            prepared.export(
                path, format="onnx", verbose=False, input_signature=[spec], opset_version=opset
            )
        except Exception as e:  # tf2onnx raises many kinds; the message is what matters
            raise ExportError(
                f"Keras' ONNX exporter (tf2onnx {modules['tf2onnx'].__version__}) could not "
                f"convert model '{model.name}' at {precision}: {type(e).__name__}: {e}"
            ) from e
    return check_file(path, prepared, precision, dynamic_batch)


def check_file(path, prepared, precision="float32", dynamic_batch=False):
    """Loads the ONNX file with onnxruntime and compares it with the Keras model
    it was exported from (`prepare(...)`) on `probe_pixels`; ExportError unless
    the input, the outputs and the main output's values are as expected."""
    classifier = ONNXClassifier(path)
    height, width = classifier.image_size
    channels = int(prepared.inputs[0].shape[-1])
    expected_shape = [None if dynamic_batch else 1, height, width, channels]
    if classifier.input["shape"] != expected_shape or classifier.input["dtype"] != "float32":
        raise ExportError(
            f"{path}: input {classifier.input}, expected {INPUT_NAME} float32 {expected_shape}."
        )
    expected_names = sorted(prepared.output)  # the output dict's keys
    if sorted(classifier.output_names) != expected_names:
        raise ExportError(f"{path}: outputs {classifier.output_names}, expected {expected_names}.")
    main = classifier.main_output
    pixels = probe_pixels((height, width), channels=channels)
    expected = np.concatenate(
        [
            keras.ops.convert_to_numpy(prepared(pixels[i : i + 1], training=False)[main])
            for i in range(len(pixels))
        ]
    )
    produced = classifier.run(pixels, main)
    delta = float(np.abs(produced - expected).max())
    bound = CHECK_BOUNDS[precision] * max(1.0, float(np.abs(expected).max()))
    if not np.isfinite(produced).all() or not delta <= bound:
        raise ExportError(
            f"{path}: onnxruntime's {main} differ from the Keras model's "
            f"by {delta:.3g} on the probe images (at most "
            f"{bound:.3g} expected at {precision}): the "
            "conversion does not compute the model."
        )
    return {
        "input": classifier.input,
        "outputs": list(classifier.output_names),
        "opset": opset_of(path),
        "check": {
            "probe_images": len(pixels),
            "output": main,
            "max_abs_delta": delta,
            "bound": bound,
        },
    }


def _load(path):
    return require_packages()["onnx"].load(path)


def _graph_nodes(graph):
    """Every node of `graph` and of its subgraphs (If/Loop bodies)."""
    for node in graph.node:
        yield node
        for attribute in node.attribute:
            for subgraph in [attribute.g] if attribute.HasField("g") else attribute.graphs:
                yield from _graph_nodes(subgraph)


def operator_counts(path):
    """{operator: count} over the graph and its subgraphs; operators outside the
    standard ONNX domains appear as 'domain:Op'."""
    counts = collections.Counter(
        node.op_type if node.domain in _STANDARD_DOMAINS else f"{node.domain}:{node.op_type}"
        for node in _graph_nodes(_load(path).graph)
    )
    return dict(sorted(counts.items()))


def non_standard_ops(counts):
    """The names in `operator_counts(...)` outside the standard ONNX domains."""
    return [name for name in counts if ":" in name]


def constant_bytes(path):
    """Bytes of the graph's initializers (weights and other constants)."""
    numpy_helper = importlib.import_module("onnx.numpy_helper")
    return int(sum(numpy_helper.to_array(init).nbytes for init in _load(path).graph.initializer))


def opset_of(path):
    """The standard-domain opset the file declares."""
    for entry in _load(path).opset_import:
        if entry.domain in _STANDARD_DOMAINS:
            return int(entry.version)
    return None


def _dimension(dim):
    return int(dim) if isinstance(dim, int) else None  # a named (dynamic) axis


class ONNXClassifier:
    """An exported model run by onnxruntime's CPU provider. Its `main_output` is
    the first of `serving.OUTPUT_NAMES` the file has (`probabilities` for a
    classifier ending in logits, whose file also has `logits`).

    Args:
        path: the .onnx file.
        num_threads: intra-op threads (None: onnxruntime's default, one per core).
    """

    def __init__(self, path, num_threads=None):
        ort = require_packages()["onnxruntime"]
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        if num_threads:
            options.intra_op_num_threads = int(num_threads)
            options.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            os.fspath(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise ExportError(f"{path}: {len(inputs)} inputs, expected one ({INPUT_NAME}).")
        shape = [_dimension(d) for d in inputs[0].shape]
        dtype = inputs[0].type.removeprefix("tensor(").removesuffix(")")
        self.input = {
            "name": inputs[0].name,
            "shape": shape,
            "dtype": "float32" if dtype == "float" else dtype,
        }
        self.output_names = [output.name for output in self.session.get_outputs()]
        if len(shape) != 4 or None in shape[1:]:
            raise ExportError(f"{path}: input shape {shape}, expected (batch, H, W, C).")
        main = [name for name in serving.OUTPUT_NAMES if name in self.output_names]
        if not main:
            raise ExportError(
                f"{path}: outputs {self.output_names}, none of {list(serving.OUTPUT_NAMES)}."
            )
        self.main_output = main[0]
        self.image_size = (shape[1], shape[2])
        self.channels = shape[3]
        self.batch_size = shape[0]  # None: dynamic

    def run(self, pixels, output=None):
        """float (N, H, W, C) pixels in [0, 255] -> `output` (N, ...) float32 (the
        main output by default), in batches the file accepts (one image at a time
        for a batch-1 file)."""
        pixels = np.asarray(pixels, np.float32)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (*self.image_size, self.channels):
            raise ValueError(
                f"pixels must be (N, {self.image_size[0]}, {self.image_size[1]}"
                f", {self.channels}) for this file, got {pixels.shape}."
            )
        output = output or self.main_output
        step = self.batch_size or 100
        return np.concatenate(
            [
                self.session.run([output], {self.input["name"]: pixels[i : i + step]})[0]
                for i in range(0, len(pixels), step)
            ]
        ).astype(np.float32)

    def predict(self, pixels):
        """pixels (N, H, W, C) in [0, 255] -> the main output (N, ...) float32:
        probabilities (N, K) for a classifier."""
        return self.run(pixels)

    def logits(self, pixels):
        """pixels (N, H, W, C) in [0, 255] -> logits (N, K) float32 (a classifier
        ending in logits)."""
        return self.run(pixels, "logits")

    def latency_ms(self, pixels, repeats=200, warmup=20):
        """Median and mean milliseconds per run at batch 1 over `repeats` runs
        cycling through `pixels` (N, H, W, C), after `warmup` (`timing.latency_ms`)."""
        feeds = [{self.input["name"]: np.asarray(image[None], np.float32)} for image in pixels]
        return timing.latency_ms(
            lambda i: self.session.run([self.main_output], feeds[i % len(feeds)]),
            repeats,
            warmup,
        )


def keras_forward(model):
    """The Keras model as Keras' predict runs it: a tf.function over [0, 255]
    pixels, XLA-compiled where `model.jit_compile` says so."""
    return tf.function(
        lambda x: model(scale_pixels(x), training=False), jit_compile=bool(model.jit_compile)
    )


def keras_latency_ms(model, pixels, repeats=200, warmup=20, forward=None):
    """The Keras model's milliseconds per image at batch 1 (`keras_forward`,
    under TensorFlow's default thread pools) over `pixels` (N, H, W, C) in
    [0, 255]; `forward`: a `keras_forward(model)` to reuse."""
    forward = forward or keras_forward(model)
    inputs = [tf.constant(np.asarray(image[None], np.float32)) for image in pixels]
    result = timing.latency_ms(lambda i: forward(inputs[i % len(inputs)]).numpy(), repeats, warmup)
    threads = tf.config.threading.get_intra_op_parallelism_threads()
    return {
        **result,
        "jit_compile": bool(model.jit_compile),
        "intra_op_threads": threads or f"TensorFlow's default ({os.cpu_count()} cores)",
    }


def build_report(
    path,
    precision,
    reference,
    pixels,
    labels=None,
    threads=(1, 2),
    latency_repeats=200,
    keras_model=None,
    extra=None,
):
    """The report dict of the ONNX file `path` against `reference` (uint8 pixels
    -> the file's main output, e.g. deploy/report.keras_reference) on `pixels`
    (N, H, W, C) uint8: export_tflite's report with ONNX's ops, and the Keras
    model's latency beside onnxruntime's when `keras_model` is given."""
    from keras_vit_deploy import report as report_lib

    counts = operator_counts(path)
    classifier = ONNXClassifier(path)
    comparison = report_lib.compare(
        reference(pixels), classifier.predict(pixels), labels, classifier.main_output
    )
    if "tflite_accuracy" in comparison:  # compare() names the candidate after TFLite
        comparison["onnx_accuracy"] = comparison.pop("tflite_accuracy")
    report = {
        **(extra or {}),
        "precision": precision,
        "file_size_bytes": os.path.getsize(path),
        "constant_bytes": constant_bytes(path),
        "opset": opset_of(path),
        "ops": sorted(counts),
        "op_counts": counts,
        "standard_ops_only": not non_standard_ops(counts),
        "runtime": RUNTIME,
        "versions": versions(),
        "input": {"shape": classifier.input["shape"], "dtype": classifier.input["dtype"]},
        "outputs": classifier.output_names,
        **comparison,
        "latency_per_image": {},
    }
    for count in threads:
        timer = ONNXClassifier(path, num_threads=count)
        report["latency_per_image"][f"{count}_threads"] = timer.latency_ms(
            pixels, repeats=latency_repeats
        )
    if keras_model is not None:
        report["keras_latency_per_image"] = keras_latency_ms(
            keras_model, pixels, repeats=latency_repeats
        )
    return report
