"""absl flags shared by tools/export_savedmodel.py, tools/export_tflite.py,
tools/export_onnx.py and tools/export_openvino.py (and tools/visualize.py,
tools/fewshot.py): which model to export, for the export tools what it should output,
and the images they calibrate and compare on."""

from absl import app, flags

import keras_vit
from keras_vit_data import fashion_mnist
from keras_vit_deploy import datasets, preprocessing, sources

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
    images (`datasets.load_images`) and write a JSON report."""
    flags.DEFINE_string("report", None, "JSON report to write (also printed).")
    flags.DEFINE_string(
        "eval_data",
        None,
        "TFRecord glob of comparison images (default: the Fashion-MNIST test set).",
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


def comparison_images(size, channels):
    """(pixels (N, H, W, channels), labels) for --report: --eval_data's images, or
    Fashion-MNIST's test set, at `size`; None without --report."""
    if not FLAGS.report:
        return None
    pixels, labels = datasets.load_images(
        FLAGS.eval_data, size, FLAGS.num_eval_images, FLAGS.fashion_mnist_dir
    )
    where = f"--eval_data={FLAGS.eval_data}" if FLAGS.eval_data else "Fashion-MNIST"
    return preprocessing.match_channels(pixels, channels, where), labels


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
