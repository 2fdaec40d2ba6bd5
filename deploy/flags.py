"""absl flags shared by tools/export_savedmodel.py and tools/export_tflite.py:
which model to export."""

from absl import app, flags

from deploy import sources

FLAGS = flags.FLAGS


def define_model_flags():
    flags.DEFINE_string(
        "run_dir", None, "A trainers/ run directory (RUN/model_config.json + RUN/model.weights.h5)."
    )
    flags.DEFINE_string("model", None, "A keras_vit variant name, e.g. ViT_B16.")
    flags.DEFINE_string(
        "weights",
        None,
        "With --model: a registry name (imagenet21k, "
        "augreg, ...) or a .npz/.keras/.weights.h5 path.",
    )
    flags.DEFINE_integer(
        "num_classes", None, "With --model: head width (default: the checkpoint's)."
    )
    flags.DEFINE_integer(
        "image_size", None, "With --model: input resolution (default: the checkpoint's)."
    )


def model_from_flags():
    """The Keras model the flags name."""
    return sources.load_model(
        FLAGS.run_dir, FLAGS.model, FLAGS.weights, FLAGS.num_classes, FLAGS.image_size
    )


def check_command_line(argv, output_form):
    """Usage errors for stray arguments or a missing --output (`output_form`,
    e.g. '--output=DIR')."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not FLAGS.output:
        raise app.UsageError(f"{output_form} is required.")
