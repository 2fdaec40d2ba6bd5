"""The JSON report of a .tflite file: size, ops, agreement with the reference
(the Keras model, or the SavedModel it was exported to) on real images, and
latency per image with the TFLite interpreter.

The comparison follows what the file returns (`deploy/serving.py`): for a
classifier's `probabilities` (or `scores`) top-1 agreement, max and mean |delta|
and the accuracies; for `features` and `feature_map`, max and mean |delta| and
the reference's largest |value| (the scale the delta is to be read against)."""

import numpy as np
import tensorflow as tf
from keras_vit_deploy import interpreter, serving, tflite
from keras_vit_deploy.datasets import DataError
from keras_vit_deploy.preprocessing import scale_pixels

# The per-value name of each output in the report's keys (max_abs_delta_<unit>).
UNITS = {
    "probabilities": "probability",
    "scores": "score",
    "features": "feature",
    "feature_map": "feature",
}
CLASS_OUTPUTS = ("probabilities", "scores")


def keras_reference(model, batch_size=100):
    """uint8 (N, H, W, C) -> what the exports return (N, ...) from the Keras model
    itself: the softmax of its logits, or its own output (`serving.model_outputs`)."""
    spec = serving.model_outputs(model, "the report")

    def reference(pixels):
        values = model.predict(scale_pixels(pixels), batch_size=batch_size, verbose=0)
        values = tf.cast(values, tf.float32)
        return (tf.nn.softmax(values, axis=-1) if spec.softmax else values).numpy()

    return reference


def saved_model_reference(loaded, batch_size=100):
    """uint8 (N, H, W, C) -> the main output (N, ...) of a loaded SavedModel's
    `<prefix>_images` signature."""
    served = serving.loaded_signatures(loaded)
    signature = loaded.signatures[served.images]

    def reference(pixels):
        return np.concatenate(
            [
                signature(images=tf.constant(pixels[i : i + batch_size]))[served.output].numpy()
                for i in range(0, len(pixels), batch_size)
            ]
        )

    return reference


def compare(reference, candidate, labels=None, output="probabilities"):
    """Agreement of `candidate` with `reference` (both (N, ...), the `output` of
    `serving.OUTPUT_NAMES`): max and mean |delta|; for classifier outputs the
    top-1 agreement and, when `labels` (N,) are known (-1 = unknown), the
    accuracies; for features the reference's largest |value|."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    if reference.shape != candidate.shape:
        raise ValueError(
            f"the compared {output} have shapes {candidate.shape} and {reference.shape}."
        )
    delta = np.abs(candidate - reference)
    unit = UNITS[output]
    result = {"num_images": int(len(reference)), "output": output}
    if output in CLASS_OUTPUTS:
        result["top1_agreement"] = float(np.mean(reference.argmax(1) == candidate.argmax(1)))
    else:
        result["max_abs_reference"] = float(np.abs(reference).max())
    result[f"max_abs_delta_{unit}"] = float(delta.max())
    result[f"mean_abs_delta_{unit}"] = float(delta.mean())
    if labels is not None and output in CLASS_OUTPUTS:
        labels = np.asarray(labels)
        known = labels >= 0
        if known.any():
            if labels.max() >= reference.shape[1]:
                raise DataError(
                    f"the comparison images have labels up to {labels.max()}; the "
                    f"model has {reference.shape[1]} classes: not its data set."
                )
            result["reference_accuracy"] = float(
                np.mean(reference.argmax(1)[known] == labels[known])
            )
            result["tflite_accuracy"] = float(np.mean(candidate.argmax(1)[known] == labels[known]))
    return result


def build_report(
    content,
    quantization,
    reference,
    pixels,
    labels=None,
    threads=(1, 2),
    latency_repeats=200,
    extra=None,
    output=None,
):
    """The report dict of .tflite bytes `content` against `reference` (uint8
    pixels -> the file's `output`, e.g. `keras_reference`) on `pixels`
    (N, H, W, C) uint8. `output`: the file's output name (None: its signature's)."""
    counts = tflite.operator_counts(content)
    classifier = interpreter.TFLiteClassifier(content)
    output = output or classifier.output_name or "probabilities"
    report = {
        **(extra or {}),
        "quantization": quantization,
        "file_size_bytes": len(content),
        "constant_bytes": tflite.constant_bytes(content),
        "ops": sorted(counts),
        "op_counts": counts,
        "builtin_ops_only": not tflite.non_builtin_ops(counts),
        "interpreter": interpreter.INTERPRETER,
        "input": {
            "shape": [int(s) for s in classifier.input["shape"]],
            "dtype": np.dtype(classifier.input["dtype"]).name,
        },
        **compare(reference(pixels), classifier.predict(pixels), labels, output),
        "latency_per_image": {},
    }
    for count in threads:
        timer = interpreter.TFLiteClassifier(content, num_threads=count)
        report["latency_per_image"][f"{count}_threads"] = timer.latency_ms(
            pixels, repeats=latency_repeats
        )
    return report
