"""The JSON report of a .tflite file: size, ops, agreement with the reference
(the Keras model, or the SavedModel it was exported to) on real images, and
latency per image with the TFLite interpreter."""

import numpy as np
import tensorflow as tf

from deploy import interpreter, serving, tflite
from deploy.datasets import DataError
from deploy.preprocessing import scale_pixels


def keras_reference(model, batch_size=100):
    """uint8 (N, H, W, 3) -> probabilities (N, K) from the Keras model itself."""

    def probabilities(pixels):
        logits = model.predict(scale_pixels(pixels), batch_size=batch_size, verbose=0)
        return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1).numpy()

    return probabilities


def saved_model_reference(loaded, batch_size=100):
    """uint8 (N, H, W, 3) -> probabilities (N, K) from a loaded SavedModel's
    predict_images signature."""
    signature = loaded.signatures[serving.PREDICT_IMAGES]

    def probabilities(pixels):
        return np.concatenate(
            [
                signature(images=tf.constant(pixels[i : i + batch_size]))["probabilities"].numpy()
                for i in range(0, len(pixels), batch_size)
            ]
        )

    return probabilities


def compare(reference, candidate, labels=None):
    """Agreement of probabilities `candidate` (N, K) with `reference` (N, K):
    top-1 agreement, max and mean |delta probability|, and accuracies when
    `labels` (N,) are known (-1 = unknown)."""
    reference, candidate = np.asarray(reference), np.asarray(candidate)
    delta = np.abs(candidate - reference)
    result = {
        "num_images": int(len(reference)),
        "top1_agreement": float(np.mean(reference.argmax(1) == candidate.argmax(1))),
        "max_abs_delta_probability": float(delta.max()),
        "mean_abs_delta_probability": float(delta.mean()),
    }
    if labels is not None:
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
):
    """The report dict of .tflite bytes `content` against `reference`
    (uint8 pixels -> probabilities) on `pixels` (N, H, W, 3) uint8."""
    counts = tflite.operator_counts(content)
    classifier = interpreter.TFLiteClassifier(content)
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
        **compare(reference(pixels), classifier.predict(pixels), labels),
        "latency_per_image": {},
    }
    for count in threads:
        timer = interpreter.TFLiteClassifier(content, num_threads=count)
        report["latency_per_image"][f"{count}_threads"] = timer.latency_ms(
            pixels, repeats=latency_repeats
        )
    return report
