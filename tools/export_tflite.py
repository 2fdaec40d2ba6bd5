r"""Converts a keras_vit model to TFLite (builtin ops only) and reports how
closely the file follows the model.

  python tools/export_tflite.py (--saved_model=DIR | --run_dir=RUN | --model=ViT_B16 \
      --weights=W [--num_classes=K] [--image_size=S]) \
      [--channels=C] [--noinclude_top [--pooling=none|token|avg|max]] \
      [--classifier_activation=softmax] \
      --quantization=none|float16|dynamic_int8|int8|int8_matmul [--representative_data=TFRECORD_GLOB] \
      --output=FILE.tflite [--report=FILE.json] [--eval_data=DATA_DIR|TFRECORD_GLOB]

The file takes `images` (1, H, W, C) pixels in [0, 255] (float32; uint8 for
int8) and returns what the SavedModel serves: `probabilities` (1, K) (`scores`
for a classifier with another activation), `features` (1, D) or `feature_map`
(1, rows, cols, D). --report writes JSON: file size, ops, agreement (top-1 and
max |delta| for classifiers, max |delta| for features) against the Keras model
(the SavedModel's <prefix>_images signature with --saved_model) on
--num_eval_images real images of the model's own data (--eval_data, else the run's:
deploy/datasets.py `comparison_set`; accuracies only where the images are labelled
with the model's classes, else agreement alone, said so), brought to the model's
channels, and latency per image at 1 and 2 interpreter threads; its last line sums
it up. The serving path recommended for a model of this size is printed
(deploy/recommend.py).
"""

from keras_vit_cli import console

console.start_program(__name__, keras_backend="tensorflow")  # before TensorFlow is imported

from absl import flags

from keras_vit_cli.machine import machine_info
from keras_vit_deploy import flags as deploy_flags
from keras_vit_deploy import recommend, serving, tflite, tflite_runtime
from keras_vit_deploy import report as report_lib

FLAGS = flags.FLAGS
deploy_flags.define_export_flags(".tflite file to write.")
deploy_flags.define_comparison_flags()
flags.DEFINE_string("saved_model", None, "A SavedModel from tools/export_savedmodel.py.")
flags.DEFINE_enum("quantization", "none", tflite.QUANTIZATIONS, "Weights/activations.")
deploy_flags.define_calibration_flags("--quantization=int8 or int8_matmul")
flags.DEFINE_integer("latency_repeats", 200, "Timed invokes per thread count.")


def _source():
    """(loaded SavedModel or None, Keras model or None, reference function,
    image size, channels, output name, size for deploy/recommend.py)."""
    import tensorflow as tf

    if FLAGS.saved_model:
        if FLAGS.run_dir or FLAGS.model:
            raise ValueError("Give one of --saved_model, --run_dir or --model.")
        if not tf.io.gfile.isdir(FLAGS.saved_model):
            raise ValueError(f"--saved_model={FLAGS.saved_model}: no such directory.")
        loaded = tf.saved_model.load(FLAGS.saved_model)
        served = serving.loaded_signatures(loaded)
        reference = report_lib.saved_model_reference(loaded)
        size = recommend.saved_model_size(loaded, served.image_size)
        return loaded, None, reference, served.image_size, served.channels, served.output, size
    model = deploy_flags.model_from_flags()
    spec = serving.model_outputs(model, "the TFLite file")
    reference = report_lib.keras_reference(model)
    size = recommend.model_size(model)
    return None, model, reference, spec.image_size, spec.channels, spec.name, size


def main(argv):
    deploy_flags.check_command_line(argv, "--output=FILE.tflite")
    try:
        loaded, model, reference, size, channels, output, model_size = _source()
        calibration = None
        if FLAGS.quantization in tflite.CALIBRATED:
            calibration = deploy_flags.calibration_images(
                f"--quantization={FLAGS.quantization}", size, channels
            )
        evaluation = deploy_flags.comparison_images(size, channels, reference, output)
    except (ValueError, OSError) as e:  # bad flags or data, unknown variant, missing files
        raise console.UserError.of(e) from e
    if model is not None:
        content = tflite.convert_keras_model(model, FLAGS.quantization, calibration)
    else:
        content = tflite.convert_saved_model(FLAGS.saved_model, FLAGS.quantization, calibration)
    import tensorflow as tf

    with tf.io.gfile.GFile(FLAGS.output, "wb") as f:  # local, gs://, ram://
        f.write(content)
    print(
        f"Wrote {FLAGS.output} ({len(content)} bytes, {FLAGS.quantization}, {output}); ops: "
        f"{', '.join(tflite.operator_counts(content))}"
    )
    recommended = recommend.recommendation(machine_info()["cpu_kind"], model_size)
    print(recommend.sentence(recommended))
    if FLAGS.report:
        source = (
            {"saved_model": FLAGS.saved_model}
            if loaded is not None
            else {"run_dir": FLAGS.run_dir, "model": FLAGS.model, "weights": FLAGS.weights}
        )
        extra = {
            "tflite_file": FLAGS.output,
            "reference": "saved_model" if loaded is not None else "keras",
            "source": {k: v for k, v in source.items() if v},
            "eval_data": evaluation.source,
            "comparison": evaluation.note,
            "representative_data": FLAGS.representative_data,
            "recommended_runtime": recommended,
        }
        result = report_lib.build_report(
            tflite_runtime.TFLiteClassifier(content),
            tflite.file_facts(content, FLAGS.quantization),
            reference,
            evaluation.pixels,
            evaluation.labels,
            latency_repeats=FLAGS.latency_repeats,
            extra=extra,
            output=output,
        )
        report_lib.write_report(FLAGS.report, result)
        print(report_lib.summary_line(FLAGS.report, result))


if __name__ == "__main__":
    console.run_app(main)
