"""The JSON report of an exported file, TFLite or ONNX: its format's facts (size,
ops), its runtime's (`deploy/runtime.py`), agreement with the reference (the Keras
model, or the SavedModel it was exported to) on real images, and latency per image
with that runtime (and the Keras model's beside it, when asked).

The comparison follows what the file returns (`deploy/serving.py`): for a
classifier's `probabilities` (or `scores`) top-1 agreement, max and mean |delta|
and the accuracies; for `features` and `feature_map`, max and mean |delta| and
the reference's largest |value| (the scale the delta is to be read against)."""

import json
import os

import numpy as np
import tensorflow as tf

from keras_vit_data.records import DataError
from keras_vit_deploy import keras_runtime, serving

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
    return keras_runtime.KerasClassifier(model, batch_size).predict


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


def compare(reference, candidate, labels=None, output="probabilities", *, file_format):
    """Agreement of `candidate` with `reference` (both (N, ...), the `output` of
    `serving.OUTPUT_NAMES`): max and mean |delta|; for classifier outputs the
    top-1 agreement and, when `labels` (N,) are known (-1 = unknown), the
    accuracies (`reference_accuracy` and the candidate's, named after its
    `file_format`: 'tflite' -> `tflite_accuracy`, 'onnx' -> `onnx_accuracy`); for
    features the reference's largest |value|."""
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
            result[f"{file_format}_accuracy"] = float(
                np.mean(candidate.argmax(1)[known] == labels[known])
            )
    return result


def build_report(
    classifier,
    file_facts,
    reference,
    pixels,
    labels=None,
    threads=(1, 2),
    latency_repeats=200,
    extra=None,
    output=None,
    keras_model=None,
):
    """The report dict of an exported file against `reference` (uint8 pixels -> the
    file's `output`, e.g. `keras_reference`) on `pixels` (N, H, W, C) uint8.

    Args:
        classifier: the file's runtime (`tflite_runtime.TFLiteClassifier`,
            `onnx_runtime.ONNXClassifier`), which names the accuracy
            (`compare`'s `file_format`) and gives `runtime_facts()` and, per
            thread count in `threads`, `with_threads(count)` to time.
        file_facts: the format's facts of the file (`tflite.file_facts`,
            `onnx_file.file_facts`).
        output: the file's output name (None: the classifier's `output_name`).
        keras_model: when given, the Keras model's latency beside the runtime's
            (`keras_runtime.KerasClassifier.latency_ms`).
    Returns:
        {**extra, **file_facts, **classifier.runtime_facts(), **compare(...),
        'latency_per_image': {'<count>_threads': ...}, ['keras_latency_per_image']}.
    """
    output = output or classifier.output_name or "probabilities"
    comparison = compare(
        reference(pixels),
        classifier.predict(pixels),
        labels,
        output,
        file_format=classifier.file_format,
    )
    report = {
        **(extra or {}),
        **file_facts,
        **classifier.runtime_facts(),
        **comparison,
        "latency_per_image": {},
    }
    for count in threads:
        report["latency_per_image"][f"{count}_threads"] = classifier.with_threads(count).latency_ms(
            pixels, repeats=latency_repeats
        )
    if keras_model is not None:
        report["keras_latency_per_image"] = keras_runtime.KerasClassifier(keras_model).latency_ms(
            pixels, repeats=latency_repeats
        )
    return report


def summary_line(path, report):
    """The last line an export tool prints after its report (written to `path`):
    agreement with the reference on which images, and the accuracies where the
    report scores them (else why not: the report's `comparison`)."""
    unit = UNITS.get(report.get("output"), "value")
    parts = [f"Report {path}: {report['num_images']} images of {report['eval_data']}"]
    if "top1_agreement" in report:
        parts.append(f"top-1 agreement {100 * report['top1_agreement']:.1f}%")
    parts.append(f"max |delta {unit}| {report[f'max_abs_delta_{unit}']:.2g}")
    accuracy = next(
        (k for k in report if k.endswith("_accuracy") and k != "reference_accuracy"), None
    )
    if accuracy:
        parts.append(
            f"accuracy {100 * report[accuracy]:.1f}% (reference "
            f"{100 * report['reference_accuracy']:.1f}%)"
        )
    else:
        parts.append(report.get("comparison", "no accuracy"))
    return ", ".join(parts) + "."


def write_report(path, report):
    """Writes `report` as indented JSON to `path` (its folder created) and prints it."""
    text = json.dumps(report, indent=1)
    folder = os.path.dirname(path)
    if folder:
        tf.io.gfile.makedirs(folder)  # local, gs://, ram://
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
    print(text)
