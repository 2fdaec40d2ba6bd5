"""absl flags shared by tools/export_savedmodel.py, tools/export_tflite.py,
tools/export_onnx.py and tools/export_openvino.py (and tools/visualize.py,
tools/fewshot.py): which model to export, for the export tools what it should output,
and the images they calibrate and compare on."""

import numpy as np
from absl import app, flags

import keras_vit
from keras_vit import run_directory
from keras_vit_data import fashion_mnist
from keras_vit_deploy import datasets, preprocessing, report, sources

FLAGS = flags.FLAGS
POOLINGS = ("none", "token", "avg", "max")  # --pooling (keras_vit's, None as 'none')


def define_model_flags():
    flags.DEFINE_string(
        "run_dir", None, "A trainers/ run directory (RUN/model_config.json + RUN/model.weights.h5)."
    )
    flags.DEFINE_string("model", None, "A keras_vit variant name, e.g. ViT_B16.")
    flags.DEFINE_string(
        "weights",
        None,
        "With --model: a registry name (imagenet21k, augreg, ...), augreg:<AugReg file "
        "name>, an https:// or gs:// URL of an official .npz, or a .npz/.keras/.weights.h5 "
        "path.",
    )
    flags.DEFINE_integer(
        "num_classes", None, "With --model: head width (default: the checkpoint's)."
    )
    flags.DEFINE_integer(
        "image_size", None, "With --model: input resolution (default: the checkpoint's)."
    )


def define_output_flags():
    """What the exported model outputs and takes, changed from the model's own:
    the model is rebuilt with them and its weights carried over
    (`keras_vit.checkpoint.assign_params`: RGB input weights adapted to other
    channel counts, an unused head dropped)."""
    flags.DEFINE_integer(
        "channels",
        None,
        "Input channels (default: the model's); RGB weights are adapted (1: summed over RGB).",
    )
    flags.DEFINE_bool(
        "include_top",
        None,
        "False: export the headless model (features, or a feature map with --pooling=none).",
    )
    flags.DEFINE_enum(
        "pooling",
        None,
        POOLINGS,
        "With --noinclude_top: none (the patch-token feature map), token, avg or max "
        "(a feature vector); default: the model's representation.",
    )
    flags.DEFINE_string(
        "classifier_activation",
        None,
        "A Keras activation on the head (e.g. softmax: the model's own probabilities).",
    )


def define_export_flags(output_help):
    """The flags every export tool has: the model (`define_model_flags`), what it
    outputs (`define_output_flags`) and --output (`output_help`)."""
    define_model_flags()
    define_output_flags()
    flags.DEFINE_string("output", None, output_help)


def define_comparison_flags():
    """The flags of the tools that check their file against the Keras model on real
    images (`datasets.comparison_set`) and write a JSON report."""
    flags.DEFINE_string("report", None, "JSON report to write (also printed).")
    flags.DEFINE_string(
        "eval_data",
        None,
        "Comparison images: a make_tfrecords directory (its validation split, else test) "
        "or a TFRecord glob. Default: the run's own data (RUN/data.json), else Fashion-MNIST's "
        "test images, scored only for a model of Fashion-MNIST's classes (the run's "
        "class_names.json) and otherwise compared with the reference alone.",
    )
    flags.DEFINE_string(
        "fashion_mnist_dir", fashion_mnist.FASHION_MNIST_DIR, "Fashion-MNIST IDX files."
    )
    flags.DEFINE_integer("num_eval_images", 1000, "Comparison images for --report.")


def define_calibration_flags(calibrated):
    """--representative_data and --num_calibration_images, for the export tools that
    calibrate activations (`calibrated`: the flag value that needs them, for the help)."""
    flags.DEFINE_string(
        "representative_data",
        None,
        "TFRecord glob (tf.train.Example in the trainer's format, data/records.py) "
        f"to calibrate {calibrated}.",
    )
    flags.DEFINE_integer("num_calibration_images", 200, "Representative images used.")


def check_calibration_flags(needed_by):
    """ValueError naming the flag to give when `needed_by` (the flag that calibrates,
    e.g. '--quantization=int8') has no --representative_data: before any model is
    loaded."""
    if not FLAGS.representative_data:
        raise ValueError(
            f"{needed_by} needs --representative_data=TFRECORD_GLOB to calibrate the activations."
        )


def calibration_images(needed_by, size, channels):
    """--representative_data's images (N, H, W, channels) at `size`, for `needed_by`
    (the flag that calibrates, e.g. '--quantization=int8'); ValueError naming the flag
    to give when there is none."""
    if not FLAGS.representative_data:
        raise ValueError(
            f"{needed_by} needs --representative_data=TFRECORD_GLOB to calibrate the activations."
        )
    images, _ = datasets.tfrecord_images(
        FLAGS.representative_data, size, FLAGS.num_calibration_images
    )
    where = f"--representative_data={FLAGS.representative_data}"
    return preprocessing.match_channels(images, channels, where)


def run_class_names():
    """The class names of --run_dir (its class_names.json), or None."""
    if not FLAGS.run_dir:
        return None
    path = run_directory.RunDirectory(FLAGS.run_dir).class_names
    return sources.read_class_names(path) if run_directory.exists(path) else None


def comparison_images(size, channels, reference, output):
    """The `datasets.Comparison` for --report (None without --report): the images
    of `datasets.comparison_set` for --eval_data, --run_dir and the run's class
    names, at `size` and brought to `channels`. `reference` (uint8 pixels -> the
    file's `output`) tells a classifier's class count. A DataError naming the flag
    for images whose classes cannot be the model's: called before anything is
    written."""
    if not FLAGS.report:
        return None
    num_classes = None
    if output in report.CLASS_OUTPUTS:
        num_classes = int(np.shape(reference(np.zeros((1, *size, channels), np.uint8)))[-1])
    comparison = datasets.comparison_set(
        size,
        FLAGS.num_eval_images,
        eval_data=FLAGS.eval_data,
        run_dir=FLAGS.run_dir,
        num_classes=num_classes,
        class_names=run_class_names(),
        fashion_mnist_dir=FLAGS.fashion_mnist_dir,
    )
    comparison.pixels = preprocessing.match_channels(comparison.pixels, channels, comparison.source)
    return comparison


def _overrides():
    """The output flags that were given, as VisionTransformer arguments."""
    if "channels" not in FLAGS:  # a tool without define_output_flags
        return {}
    overrides = {}
    if FLAGS.channels is not None:
        overrides["channels"] = FLAGS.channels
    if FLAGS.include_top is not None:
        overrides["include_top"] = FLAGS.include_top
    if FLAGS.pooling is not None:
        overrides["pooling"] = None if FLAGS.pooling == "none" else FLAGS.pooling
    if FLAGS.classifier_activation is not None:
        overrides["classifier_activation"] = FLAGS.classifier_activation
    return overrides


def with_outputs(model, **overrides):
    """`model` rebuilt from its config with `overrides` (channels, include_top,
    pooling, classifier_activation) and its weights: the model itself when there
    are none."""
    if not overrides:
        return model
    if "pooling" in overrides and overrides.get("include_top", model.include_top):
        raise ValueError("--pooling applies to a headless model: add --noinclude_top.")
    rebuilt = type(model).from_config({**model.get_config(), **overrides})
    keras_vit.checkpoint.assign_params(
        rebuilt, keras_vit.checkpoint.model_params(model), f"model '{model.name}'"
    )
    return rebuilt


def model_from_flags():
    """The Keras model the flags name."""
    model = sources.load_model(
        FLAGS.run_dir, FLAGS.model, FLAGS.weights, FLAGS.num_classes, FLAGS.image_size
    )
    return with_outputs(model, **_overrides())


def check_command_line(argv, output_form):
    """Usage errors for stray arguments or a missing --output (`output_form`,
    e.g. '--output=DIR')."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS.output:
        raise app.UsageError(f"{output_form} is required.")
