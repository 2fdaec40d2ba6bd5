r"""Exports a keras_vit model to ONNX through Keras' own exporter and reports how
closely onnxruntime follows the Keras model.

  python tools/export_onnx.py (--run_dir=RUN | --model=ViT_B16 --weights=W \
      [--num_classes=K] [--image_size=S]) [--channels=C] \
      [--noinclude_top [--pooling=none|token|avg|max]] [--classifier_activation=softmax] \
      [--precision=float32|float16|int8_dynamic] [--dynamic_batch] \
      --output=FILE.onnx [--report=FILE.json] [--eval_data=DATA_DIR|TFRECORD_GLOB]

The file takes `images` (1, H, W, C), or (batch, H, W, C) with --dynamic_batch,
float32 pixels in [0, 255] and returns `logits` and `probabilities` (B, K) for a
classifier ending in logits, else the model's own output (`probabilities`,
`scores`, `features` or `feature_map`); see deploy/onnx_file.py.
--precision=int8_dynamic writes the float32 file through onnxruntime's dynamic
quantisation (int8 weights, activations quantised per call; no calibration images).
--report writes JSON: file size, ONNX operators, agreement (top-1 and max |delta|
for classifiers, max |delta| for features) against the Keras model on
--num_eval_images real images of the model's own data (--eval_data, else the run's:
deploy/datasets.py `comparison_set`; accuracies only where the images are labelled
with the model's classes, else agreement alone, said so), brought to the model's
channels, and latency per image with onnxruntime at 1 and 2 threads beside the
Keras model's; its last line sums it up. Every export tool prints the serving path
recommended for a model of this size (deploy/recommend.py). Needs the `onnx` extra:
pip install -e '.[onnx]'.
"""

import os

from keras_vit_cli import console

console.start_program(__name__, keras_backend="tensorflow")  # before TensorFlow is imported

from absl import flags

from keras_vit_cli.machine import machine_info
from keras_vit_deploy import flags as deploy_flags
from keras_vit_deploy import (
    onnx_export,
    onnx_file,
    onnx_runtime,
    recommend,
    serving,
)
from keras_vit_deploy import report as report_lib
from keras_vit_deploy.onnx_packages import ExportError, require_packages

FLAGS = flags.FLAGS
deploy_flags.define_export_flags(".onnx file to write.")
deploy_flags.define_comparison_flags()
flags.DEFINE_enum(
    "precision",
    "float32",
    onnx_export.PRECISIONS,
    "float32; float16 (the model under Keras' mixed_float16 policy); int8_dynamic "
    "(onnxruntime's dynamic quantisation of the float32 file).",
)
flags.DEFINE_bool("dynamic_batch", False, "A dynamic batch axis (default: batch 1).")
flags.DEFINE_integer("opset", None, "ONNX opset (default: tf2onnx's).")
flags.DEFINE_integer("latency_repeats", 200, "Timed runs per thread count (and for Keras).")


def main(argv):
    deploy_flags.check_command_line(argv, "--output=FILE.onnx")
    try:
        require_packages()
    except ExportError as e:
        raise console.UserError.of(e, console.RUNTIME) from e
    try:
        model = deploy_flags.model_from_flags()
        spec = serving.model_outputs(model, "the ONNX file")
        reference = report_lib.keras_reference(model)
        evaluation = deploy_flags.comparison_images(
            spec.image_size,
            spec.channels,
            reference,
            "probabilities" if spec.softmax else spec.name,
        )
    except (ValueError, OSError) as e:  # bad flags or data, unknown variant, missing files
        raise console.UserError.of(e) from e
    try:
        exported = onnx_export.export_keras_model(
            model, FLAGS.output, FLAGS.precision, FLAGS.dynamic_batch, FLAGS.opset
        )
    except ExportError as e:
        raise console.UserError.of(e, console.RUNTIME) from e
    counts = onnx_file.operator_counts(FLAGS.output)
    batch = exported["input"]["shape"][0] or "dynamic"
    print(
        f"Wrote {FLAGS.output} ({os.path.getsize(FLAGS.output)} bytes, {FLAGS.precision}, "
        f"batch {batch}, opset {exported['opset']}, outputs {', '.join(exported['outputs'])}); "
        f"ops: {', '.join(counts)}"
    )
    recommended = recommend.recommendation(machine_info()["cpu_kind"], recommend.model_size(model))
    print(recommend.sentence(recommended))
    if FLAGS.report:
        source = {"run_dir": FLAGS.run_dir, "model": FLAGS.model, "weights": FLAGS.weights}
        extra = {
            "onnx_file": FLAGS.output,
            "reference": "keras",
            "source": {k: v for k, v in source.items() if v},
            "eval_data": evaluation.source,
            "comparison": evaluation.note,
            "dynamic_batch": FLAGS.dynamic_batch,
            "export_check": exported["check"],
            "recommended_runtime": recommended,
        }
        result = report_lib.build_report(
            onnx_runtime.ONNXClassifier(FLAGS.output),
            onnx_file.file_facts(FLAGS.output, FLAGS.precision),
            reference,
            evaluation.pixels,
            evaluation.labels,
            latency_repeats=FLAGS.latency_repeats,
            keras_model=model,
            extra=extra,
        )
        report_lib.write_report(FLAGS.report, result)
        print(report_lib.summary_line(FLAGS.report, result))


if __name__ == "__main__":
    console.run_app(main)
