"""The check after an ONNX export: onnxruntime must load the file Keras wrote, with
the input and outputs the prepared model has (`onnx_export.prepare`), and follow
that model on probe images."""

import keras
import numpy as np

from keras_vit_deploy.onnx_file import INPUT_NAME, opset_of
from keras_vit_deploy.onnx_packages import ExportError
from keras_vit_deploy.onnx_runtime import ONNXClassifier

# Max |delta| of the main output between onnxruntime and the prepared Keras model
# on the probe images, relative to the output's scale max(1, max |value|) (1 for
# probabilities; features after the final LayerNorm are O(1) to O(10)). Not a
# precision target (the report and tests/test_export_onnx.py measure that): a
# conversion that computes something else (a dropped op, a wrong constant) is off
# by far more. float32 runs the same arithmetic in another order (~1e-6 on these
# probabilities); float16 rounds activations to 11 bits in both runtimes,
# independently. int8_dynamic stores the MatMuls' weights in 8 bits and quantises
# their inputs per call: measured 1.5e-3 on the trained tiny ViT's probabilities and
# up to 4.6% of the scale on random-weight tiny models' features; 0.2 still catches a
# file that computes something else.
CHECK_BOUNDS = {"float32": 1e-4, "float16": 5e-2, "int8_dynamic": 0.2}


def probe_pixels(image_size, count=4, seed=0, channels=3):
    """Deterministic float32 pixels (count, H, W, C) in [0, 255] for the check:
    black, white and uniform noise."""
    shape = (*image_size, channels)
    noise = np.random.default_rng(seed).uniform(0, 255, (max(count - 2, 0), *shape))
    return np.concatenate([np.zeros((1, *shape)), np.full((1, *shape), 255.0), noise])[
        :count
    ].astype(np.float32)


def check_file(path, prepared, precision="float32", dynamic_batch=False):
    """Loads the ONNX file with onnxruntime and compares it with the Keras model
    it was exported from (`onnx_export.prepare(...)`) on `probe_pixels`;
    ExportError unless the input, the outputs and the main output's values are
    as expected.

    Returns:
        {'input': {name, shape, dtype}, 'outputs': [...], 'opset': N,
        'check': {probe_images, output, max_abs_delta, bound}}.
    """
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
    main = classifier.output_name
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
