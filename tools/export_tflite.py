r"""Converts a keras_vit classifier to TFLite (builtin ops only) and reports how
closely the file follows the model.

  python tools/export_tflite.py (--saved_model=DIR | --run_dir=RUN | --model=ViT_B16 \
      --weights=W [--num_classes=K] [--image_size=S]) \
      --quantization=none|float16|dynamic_int8|int8|int8_matmul [--representative_data=TFRECORD_GLOB] \
      --output=FILE.tflite [--report=FILE.json] [--eval_data=TFRECORD_GLOB]

The file takes `images` (1, H, W, 3) pixels in [0, 255] (float32; uint8 for
int8) and returns `probabilities` (1, K). --report writes JSON: file size, ops,
top-1 agreement and max |delta probability| against the Keras model (the
SavedModel's predict_images signature with --saved_model) on --num_eval_images
real images (the Fashion-MNIST test set unless --eval_data), and latency per
image at 1 and 2 interpreter threads.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from trainers import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only
os.environ["KERAS_BACKEND"] = "tensorflow"  # the export builds TF graphs

from absl import app, flags

from deploy import datasets, serving, tflite
from deploy import flags as deploy_flags
from deploy import report as report_lib

FLAGS = flags.FLAGS
deploy_flags.define_model_flags()
flags.DEFINE_string("saved_model", None, "A SavedModel from tools/export_savedmodel.py.")
flags.DEFINE_enum("quantization", "none", tflite.QUANTIZATIONS, "Weights/activations.")
flags.DEFINE_string(
    "representative_data",
    None,
    "TFRecord glob (tf.train.Example with "
    "'image/encoded') to calibrate --quantization=int8 or int8_matmul.",
)
flags.DEFINE_integer("num_calibration_images", 200, "Representative images used.")
flags.DEFINE_string("output", None, ".tflite file to write.")
flags.DEFINE_string("report", None, "JSON report to write (also printed).")
flags.DEFINE_string(
    "eval_data", None, "TFRecord glob of comparison images (default: the Fashion-MNIST test set)."
)
flags.DEFINE_string("fashion_mnist_dir", datasets.FASHION_MNIST_DIR, "Fashion-MNIST IDX files.")
flags.DEFINE_integer("num_eval_images", 1000, "Comparison images for --report.")
flags.DEFINE_integer("latency_repeats", 200, "Timed invokes per thread count.")


def _source():
    """(SavedModel directory or None, Keras model or None, reference function, image size)."""
    import tensorflow as tf

    if FLAGS.saved_model:
        if FLAGS.run_dir or FLAGS.model:
            raise ValueError("Give one of --saved_model, --run_dir or --model.")
        if not os.path.isdir(FLAGS.saved_model):
            raise ValueError(f"--saved_model={FLAGS.saved_model}: no such directory.")
        loaded = tf.saved_model.load(FLAGS.saved_model)
        size = serving.image_size_of(loaded)
        return loaded, None, report_lib.saved_model_reference(loaded), size
    model = deploy_flags.model_from_flags()
    return None, model, report_lib.keras_reference(model), tuple(model.image_size)


def main(argv):
    deploy_flags.check_command_line(argv, "--output=FILE.tflite")
    try:
        loaded, model, reference, size = _source()
        calibration = None
        if FLAGS.quantization in tflite.CALIBRATED:
            if not FLAGS.representative_data:
                raise ValueError(
                    f"--quantization={FLAGS.quantization} needs --representative_data="
                    "TFRECORD_GLOB to calibrate the activations."
                )
            calibration, _ = datasets.tfrecord_images(
                FLAGS.representative_data, size, FLAGS.num_calibration_images
            )
        evaluation = (
            datasets.load_images(
                FLAGS.eval_data, size, FLAGS.num_eval_images, FLAGS.fashion_mnist_dir
            )
            if FLAGS.report
            else None
        )
    except (ValueError, OSError) as e:  # bad flags or data, unknown variant, missing files
        raise app.UsageError(str(e)) from e
    if model is not None:
        content = tflite.convert_keras_model(model, FLAGS.quantization, calibration)
    else:
        content = tflite.convert_saved_model(FLAGS.saved_model, FLAGS.quantization, calibration)
    with open(FLAGS.output, "wb") as f:
        f.write(content)
    print(
        f"Wrote {FLAGS.output} ({len(content)} bytes, {FLAGS.quantization}); ops: "
        f"{', '.join(tflite.operator_counts(content))}"
    )
    if FLAGS.report:
        pixels, labels = evaluation
        source = (
            {"saved_model": FLAGS.saved_model}
            if loaded is not None
            else {"run_dir": FLAGS.run_dir, "model": FLAGS.model, "weights": FLAGS.weights}
        )
        extra = {
            "tflite_file": FLAGS.output,
            "reference": "saved_model" if loaded is not None else "keras",
            "source": {k: v for k, v in source.items() if v},
            "eval_data": FLAGS.eval_data or "fashion_mnist_test",
            "representative_data": FLAGS.representative_data,
        }
        result = report_lib.build_report(
            content,
            FLAGS.quantization,
            reference,
            pixels,
            labels,
            latency_repeats=FLAGS.latency_repeats,
            extra=extra,
        )
        with open(FLAGS.report, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        print(json.dumps(result, indent=1))


if __name__ == "__main__":
    console.run_app(main)
