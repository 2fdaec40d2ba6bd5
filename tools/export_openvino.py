r"""Exports a keras_vit model as an OpenVINO model (.xml + .bin) and reports how
closely OpenVINO's CPU plugin follows what it was converted from.

  python tools/export_openvino.py (--saved_model=DIR | --onnx=FILE.onnx | --run_dir=RUN \
      | --model=ViT_B16 --weights=W [--num_classes=K] [--image_size=S]) [--channels=C] \
      [--noinclude_top [--pooling=none|token|avg|max]] [--classifier_activation=softmax] \
      [--precision=float32|bfloat16|int8_weights|int8] [--representative_data=TFRECORD_GLOB] \
      --output=FILE.xml [--report=FILE.json] [--eval_data=DATA_DIR|TFRECORD_GLOB]

The file takes `images` (batch, H, W, C) float32 pixels in [0, 255] (a dynamic
batch; an ONNX file's batch is kept) and returns what the ONNX file returns
(`logits` and `probabilities` for a classifier ending in logits), or, from a
SavedModel, its main output; see deploy/openvino_export.py, which also says what
each precision computes (bfloat16 needs AVX-512-BF16 or AMX; int8 is calibrated on
--representative_data). --report writes JSON: file size, the precision the CPU
computes in, agreement (top-1 and max |delta| for classifiers, max |delta| for
features) against the source (the Keras model; the SavedModel's <prefix>_images
signature; onnxruntime on the ONNX file) on --num_eval_images real images of the
model's own data (--eval_data, else the run's: deploy/datasets.py `comparison_set`;
accuracies only where the images are labelled with the model's classes, else
agreement alone, said so), brought to the model's channels, latency per image at 1
and 2 threads, and the serving path recommended for a model of this size on this CPU
kind (deploy/recommend.py); its last line sums it up. Needs the `openvino` extra:
pip install -e '.[openvino]'.
"""

import os

from keras_vit_cli import console

console.start_program(__name__, keras_backend="tensorflow")  # before TensorFlow is imported

from absl import flags

from keras_vit_cli.machine import machine_info
from keras_vit_deploy import flags as deploy_flags
from keras_vit_deploy import (
    openvino_export,
    openvino_packages,
    openvino_runtime,
    recommend,
    serving,
)
from keras_vit_deploy import report as report_lib

FLAGS = flags.FLAGS
deploy_flags.define_export_flags(".xml file to write (its .bin beside it).")
deploy_flags.define_comparison_flags()
flags.DEFINE_string("saved_model", None, "A SavedModel from tools/export_savedmodel.py.")
flags.DEFINE_string("onnx", None, "An ONNX file from tools/export_onnx.py.")
flags.DEFINE_enum("precision", "float32", openvino_export.PRECISIONS, "What the file computes in.")
deploy_flags.define_calibration_flags("--precision=int8")
flags.DEFINE_integer("latency_repeats", 200, "Timed runs per thread count.")


def _source():
    """(source kind, Keras model or None, reference function, image size, channels,
    output name, size for deploy/recommend.py)."""
    given = [name for name in ("saved_model", "onnx", "run_dir", "model") if FLAGS[name].value]
    if len(given) > 1:
        raise ValueError(
            f"--{' and --'.join(given)}: give one of --saved_model, --onnx, --run_dir or --model."
        )
    if FLAGS.saved_model:
        import tensorflow as tf

        if not tf.io.gfile.isdir(FLAGS.saved_model):
            raise ValueError(f"--saved_model={FLAGS.saved_model}: no such directory.")
        loaded = tf.saved_model.load(FLAGS.saved_model)
        served = serving.loaded_signatures(loaded)
        reference = report_lib.saved_model_reference(loaded)
        size = recommend.saved_model_size(loaded, served.image_size)
        return (
            "saved_model",
            None,
            reference,
            served.image_size,
            served.channels,
            served.output,
            size,
        )
    if FLAGS.onnx:
        from keras_vit_deploy import onnx_runtime

        if not os.path.isfile(FLAGS.onnx):
            raise ValueError(f"--onnx={FLAGS.onnx}: no such file.")
        from keras_vit_deploy import onnx_file

        source = onnx_runtime.ONNXClassifier(FLAGS.onnx)
        return (
            "onnx",
            None,
            source.predict,
            source.image_size,
            source.channels,
            source.output_name,
            recommend.onnx_size(onnx_file.constant_bytes(FLAGS.onnx), source.image_size),
        )
    model = deploy_flags.model_from_flags()
    spec = serving.model_outputs(model, "the OpenVINO file")
    return (
        "keras",
        model,
        report_lib.keras_reference(model),
        spec.image_size,
        spec.channels,
        ("probabilities" if spec.softmax else spec.name),
        recommend.model_size(model),
    )


def main(argv):
    deploy_flags.check_command_line(argv, "--output=FILE.xml")
    try:
        openvino_packages.require("openvino")
        calibrated = FLAGS.precision in openvino_export.CALIBRATED
        if calibrated:
            deploy_flags.check_calibration_flags(f"--precision={FLAGS.precision}")
        kind, model, reference, size, channels, output, model_size = _source()
        calibration = None
        if calibrated:
            calibration = deploy_flags.calibration_images(
                f"--precision={FLAGS.precision}", size, channels
            )
        evaluation = deploy_flags.comparison_images(size, channels, reference, output)
    except (ValueError, OSError) as e:  # bad flags or data, unknown variant, missing files
        raise console.UserError.of(e) from e
    except openvino_packages.ExportError as e:
        raise console.UserError.of(e, console.RUNTIME) from e
    try:
        if kind == "saved_model":
            exported = openvino_export.export_saved_model(
                FLAGS.saved_model, FLAGS.output, FLAGS.precision, calibration
            )
        elif kind == "onnx":
            exported = openvino_export.export_onnx_file(
                FLAGS.onnx, FLAGS.output, FLAGS.precision, calibration
            )
        else:
            exported = openvino_export.export_keras_model(
                model, FLAGS.output, FLAGS.precision, calibration
            )
    except openvino_packages.ExportError as e:
        raise console.UserError.of(e, console.RUNTIME) from e
    classifier = openvino_runtime.OpenVINOClassifier(FLAGS.output)
    weights = os.path.splitext(FLAGS.output)[0] + ".bin"
    batch = exported["input"]["shape"][0] or "dynamic"
    print(
        f"Wrote {FLAGS.output} + {os.path.basename(weights)} ({os.path.getsize(weights)} bytes, "
        f"{FLAGS.precision}, computed in {classifier.inference_precision()} on this CPU, "
        f"batch {batch}, outputs {', '.join(exported['outputs'])})"
    )
    recommended = recommend.recommendation(machine_info()["cpu_kind"], model_size)
    print(recommend.sentence(recommended))
    if FLAGS.report:
        source = {
            "saved_model": FLAGS.saved_model,
            "onnx": FLAGS.onnx,
            "run_dir": FLAGS.run_dir,
            "model": FLAGS.model,
            "weights": FLAGS.weights,
        }
        extra = {
            "openvino_file": FLAGS.output,
            "reference": {"saved_model": "saved_model", "onnx": "onnxruntime"}.get(kind, "keras"),
            "source": {k: v for k, v in source.items() if v},
            "eval_data": evaluation.source,
            "comparison": evaluation.note,
            "representative_data": FLAGS.representative_data,
            "export_check": exported["check"],
            "recommended_runtime": recommended,
        }
        facts = {
            "precision": FLAGS.precision,
            "file_size_bytes": os.path.getsize(FLAGS.output) + os.path.getsize(weights),
            "weights_bytes": os.path.getsize(weights),
        }
        result = report_lib.build_report(
            classifier,
            facts,
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
