r"""Exports a keras_vit model (a classifier, or a headless feature extractor) as a
SavedModel for TF Serving.

  python tools/export_savedmodel.py --model=ViT_B16 --weights=PATH_OR_REGISTRY_NAME \
      [--num_classes=K] [--image_size=S] [--class_names=FILE] --output=DIR
  python tools/export_savedmodel.py --run_dir=RUN [--class_names=FILE] --output=DIR
  (either, and: [--channels=C] [--noinclude_top [--pooling=none|token|avg|max]]
   [--classifier_activation=softmax] [--max_pixels=N])

Signatures: serving_default (encoded JPEG/PNG strings), predict_images (uint8
pixels), predict_images_float32, predict_examples (serialized tf.Example), named
features_* / feature_map_* for headless models; see deploy/serving.py and
docs/deployment.md. The encoded-image signatures refuse an image whose header
declares more than --max_pixels pixels, before decoding it; the limit is printed and
written to the SavedModel's metadata (deploy/serving.py, `read_metadata`).
"""

from keras_vit_cli import console

console.start_program(__name__, keras_backend="tensorflow")  # before TensorFlow is imported

from absl import flags

from keras_vit import run_directory
from keras_vit.checkpoint import interop
from keras_vit_cli.machine import machine_info
from keras_vit_data import image_header
from keras_vit_deploy import flags as deploy_flags
from keras_vit_deploy import recommend, serving, sources

FLAGS = flags.FLAGS
deploy_flags.define_export_flags("SavedModel directory to write.")
flags.DEFINE_string(
    "class_names",
    None,
    "Text file with one class name per line, or a "
    "JSON file with a 'class_names' list (a make_tfrecords manifest.json); "
    "adds the top_k_names output. Default: a --run_dir's class_names.json (its data's "
    "class names), or a transformers checkpoint's (--weights) config.json id2label, where "
    "they name the head's classes.",
)
flags.DEFINE_integer("top_k", 5, "How many classes the top_k_* outputs hold.")
flags.DEFINE_integer(
    "max_pixels",
    image_header.DEFAULT_MAX_PIXELS,
    "The encoded-image signatures refuse an image whose header declares more pixels "
    "(height x width), before decoding it.",
    lower_bound=1,
)


def _stated_class_names(outputs):
    """The class names the model's source states, where they name exactly the head's
    classes (not a fresh head of another --num_classes): a training run's
    RUN/class_names.json (its data's), or --weights' id2label (a transformers
    checkpoint); else None."""
    if outputs.kind != "classifier":
        return None
    if FLAGS.run_dir:
        path = run_directory.RunDirectory(FLAGS.run_dir).class_names
        names = sources.read_class_names(path, None) if run_directory.exists(path) else None
    else:
        names = interop.class_names(FLAGS.weights) if FLAGS.weights else None
    return names if names is not None and len(names) == outputs.num_classes else None


def main(argv):
    deploy_flags.check_command_line(argv, "--output=DIR")
    try:
        model = deploy_flags.model_from_flags()
        outputs = serving.model_outputs(model, "the SavedModel")
        if FLAGS.class_names and outputs.kind != "classifier":
            raise ValueError(
                f"--class_names labels a classifier; model '{model.name}' has no head "
                f"(it returns {outputs.name})."
            )
        names = (
            sources.read_class_names(FLAGS.class_names, outputs.num_classes)
            if FLAGS.class_names
            else _stated_class_names(outputs)
        )
    except (ValueError, OSError) as e:  # bad flags, unknown variant, missing files
        raise console.UserError.of(e) from e
    signatures = serving.export_saved_model(
        model, FLAGS.output, names, FLAGS.top_k, FLAGS.max_pixels
    )
    returns = (
        f"{outputs.num_classes} classes ({outputs.name})"
        if outputs.kind == "classifier"
        else f"{outputs.name} {outputs.shape}"
    )
    print(
        f"Wrote {FLAGS.output}: model '{model.name}', image size {outputs.image_size}, "
        f"{outputs.channels} channels, {returns}; signatures: {', '.join(signatures)}; "
        f"encoded images up to {FLAGS.max_pixels} pixels"
    )
    size = recommend.model_size(model)
    print(recommend.sentence(recommend.recommendation(machine_info()["cpu_kind"], size)))


if __name__ == "__main__":
    console.run_app(main)
