r"""Writes the paper's §4.5 figures for a model: attention rollout overlays
(Fig. 6), mean attention distance per head against depth, position-embedding
similarity and the principal components of the patch-embedding filters (Fig. 7; a
hybrid's are its ResNet stem's filters, which read the pixels); and DINOv2's view of
dense features: the last block's patch features, their first three principal
components as colours (one PCA over all the images' patches).

  python tools/visualize.py --run_dir=RUN --data_dir=DATA --output_dir=FIGS
  python tools/visualize.py --model=ViT_B16 --weights=imagenet21k+imagenet2012 \
      --images='photos/*.jpg' --output_dir=FIGS
  python tools/visualize.py --model=DINOv2_B14_reg --weights=lvd142m \
      --image_size=448 --images='photos/*.jpg' --output_dir=FIGS

Outputs in --output_dir: attention_rollout.png, attention_distance.png,
position_embedding_similarity.png, embedding_filters.png, patch_feature_pca.png and
inspect.json (the distances in pixels and the explained variances). A figure that has no meaning
for the model (filters of other than 1 or 3 input channels) is skipped with a
message saying why.
"""

import json
import os

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

from absl import app, flags, logging

from keras_vit_tools import figures, inspect_io

inspect_io.define_model_flags()

flags.DEFINE_string("images", None, "Glob of PNG/JPEG files or TFRecord shards.")
flags.DEFINE_string("data_dir", None, "Without --images: a tools/make_tfrecords.py directory.")
flags.DEFINE_string("split", "test", "With --data_dir: the split to take images from.")
flags.DEFINE_integer("num_images", 6, "Images shown in the rollout figure.")
flags.DEFINE_integer("distance_images", 128, "Images the mean attention distance is averaged over.")
flags.DEFINE_integer("num_components", 28, "Principal components of the filters shown.")
flags.DEFINE_bool(
    "grayscale_filters",
    False,
    "Sum the filters over the colour channels "
    "first (models trained on grey images, where R = G = B).",
)
flags.DEFINE_string("output_dir", None, "Where the PNG files go.")
flags.DEFINE_integer("batch_size", 32, "Batch size for the attention model.")

FLAGS = flags.FLAGS


def write_figures(
    model,
    images,
    labels,
    output_dir,
    num_images,
    num_components,
    batch_size=32,
    grayscale_filters=False,
    source=None,
):
    """Writes the five figures; returns {figure name: path or reason skipped} and
    the numbers behind them. `source` names where the images come from (`images_source`):
    the attention figures and inspect.json say it."""
    from keras_vit import inspect as vit_inspect

    os.makedirs(output_dir, exist_ok=True)
    out = lambda name: os.path.join(output_dir, name)
    inputs = inspect_io.model_inputs(model, images)
    shown, shown_inputs = images[:num_images], inputs[:num_images]
    titles = [f"label {int(l)}" if l >= 0 else "" for l in labels[:num_images]]
    written, numbers = {}, {}
    maps = vit_inspect.attention_maps(model, shown_inputs, batch_size=batch_size)
    written["attention_rollout"] = figures.attention_overlays(
        shown, maps, out("attention_rollout.png"), titles, source
    )
    distance = vit_inspect.attention_distance(model, inputs, batch_size=batch_size)
    numbers["mean_attention_distance_px"] = distance.round(3).tolist()
    numbers["distance_images"] = len(images)
    numbers["images"] = source
    encoder = model.get_layer("Transformer")
    uniform = vit_inspect.uniform_attention_distance(
        encoder.grid_size, vit_inspect.grid_cell_pixels(model)
    )
    numbers["uniform_attention_distance_px"] = round(uniform, 3)
    written["attention_distance"] = figures.attention_distance(
        distance, out("attention_distance.png"), model.image_size, uniform, len(images), source
    )
    written["position_embedding_similarity"] = figures.position_similarity(
        vit_inspect.position_embedding_similarity(model), out("position_embedding_similarity.png")
    )
    try:
        components, explained = vit_inspect.embedding_filter_components(
            model, num_components, grayscale=grayscale_filters
        )
    except vit_inspect.NotMeaningfulError as e:
        written["embedding_filters"] = f"skipped: {e}"
    else:
        numbers["filter_explained_variance"] = explained.round(4).tolist()
        numbers["filters"] = vit_inspect.pixel_filters(model)[1]
        written["embedding_filters"] = figures.embedding_filters(
            components, out("embedding_filters.png"), explained, title=numbers["filters"]
        )
    colours, explained = vit_inspect.patch_feature_pca(model, shown_inputs, batch_size=batch_size)
    numbers["patch_feature_explained_variance"] = explained.round(4).tolist()
    written["patch_feature_pca"] = figures.patch_feature_pca(
        shown,
        colours,
        out("patch_feature_pca.png"),
        explained,
        f"block {model.num_layers} after the final LayerNorm",
        source,
    )
    with open(out("inspect.json"), "w") as f:
        json.dump({"figures": written, **numbers}, f, indent=1)
    return written, numbers


def images_source(images, data_dir, split):
    """Where the figures' images come from, as the figures name it: '--images=GLOB', or
    'the SPLIT split of DATA'."""
    return f"--images={images}" if images else f"the {split} split of {data_dir}"


def main(argv):
    del argv
    if not FLAGS.output_dir:
        raise app.UsageError("--output_dir is required")
    try:
        model = inspect_io.load_model_from_flags()
        count = max(FLAGS.num_images, FLAGS.distance_images)
        split = FLAGS.split
        if not FLAGS.images and FLAGS.data_dir:
            split = inspect_io.data_split(FLAGS.data_dir, split, "--split", FLAGS["split"].present)
        images, labels = inspect_io.images_for_figures(
            FLAGS.images, FLAGS.data_dir, split, model.image_size, count, model.channels
        )
    except (ValueError, FileNotFoundError) as e:
        raise console.UserError.of(e) from e
    written, _ = write_figures(
        model,
        images,
        labels,
        FLAGS.output_dir,
        FLAGS.num_images,
        FLAGS.num_components,
        FLAGS.batch_size,
        FLAGS.grayscale_filters,
        images_source(FLAGS.images, FLAGS.data_dir, split),
    )
    for name, result in written.items():
        logging.info("%s: %s", name, result)
        print(f"{name}: {result}")


if __name__ == "__main__":
    console.run_app(main)
