"""What tools/visualize.py and tools/fewshot.py share: the model and the images.

The model flags and loader are the export tools' (deploy/flags.py,
deploy/sources.py): --run_dir=RUN (model_config.json + model.weights.h5) or
--model=NAME --weights=W [--image_size, --num_classes]. Images come from a glob
of PNG/JPEG files or of TFRecord shards (tools/make_tfrecords.py), or from a
--data_dir split, brought to the model's size as deploy/datasets.py does and
scaled to [-1, 1].
"""

import glob
import os

import numpy as np

IMAGE_EXTS = (".png", ".jpg", ".jpeg")


def define_model_flags():
    from keras_vit_deploy import flags as deploy_flags

    deploy_flags.define_model_flags()


def load_model_from_flags():
    from keras_vit_deploy import flags as deploy_flags

    return deploy_flags.model_from_flags()


def _image_files(paths, image_size):
    import tensorflow as tf

    from keras_vit_deploy import datasets

    pixels = []
    for path in paths:
        try:
            image = tf.io.decode_image(tf.io.read_file(path), expand_animations=False).numpy()
        except tf.errors.InvalidArgumentError as e:
            raise datasets.DataError(
                f"{path}: not a decodable image ({e.message.splitlines()[0]})"
            ) from e
        pixels.append(datasets.to_model_pixels(image, image_size, path))
    return np.stack(pixels), np.full(len(paths), -1, np.int64)


def load_images(pattern, image_size, limit, channels=3):
    """The first `limit` images (sorted paths) matching `pattern`: image files or
    TFRecord shards, brought to `channels` as the serving signature does (grey
    repeated to RGB, RGB to its luma).

    Returns:
      (images (N, H, W, channels) float32 in [-1, 1] at `image_size`, labels (N,)
      int64, -1 where unknown).
    """
    import keras_vit
    from keras_vit_deploy import datasets, preprocessing

    paths = sorted(glob.glob(pattern))
    if not paths:
        raise FileNotFoundError(f"--images={pattern}: no files match")
    image_files = [p for p in paths if p.lower().endswith(IMAGE_EXTS)]
    if image_files:
        pixels, labels = _image_files(image_files[:limit], image_size)
    else:
        pixels, labels = datasets.tfrecord_images(pattern, image_size, limit)
    pixels = preprocessing.match_channels(pixels, channels, pattern)
    return np.asarray(keras_vit.preprocess_input(pixels)), labels


# The evaluation splits a data directory may have, in the order they are taken.
EVAL_SPLITS = ("test", "validation")


def data_split(data_dir, split, flag, given):
    """The split of `data_dir` (a tools/make_tfrecords.py directory) to read: `split` where
    the user gave `flag` (`given`) or the data has it; else the data's first EVAL_SPLITS
    split, said in one line. FileNotFoundError naming the splits the data has where it
    has none of them."""
    import logging

    import tensorflow as tf

    from keras_vit_data import records

    def shards(name):
        return tf.io.gfile.glob(os.path.join(data_dir, f"{name}-*{records.SHARD_SUFFIX}"))

    if given or shards(split):
        return split
    if not tf.io.gfile.isdir(data_dir):
        raise FileNotFoundError(f"--data_dir={data_dir}: no such directory")
    for name in EVAL_SPLITS:
        if shards(name):
            logging.getLogger("tools").info(
                "--data_dir=%s has no %s split: using its %s split", data_dir, split, name
            )
            return name
    have = ", ".join(sorted({os.path.basename(p).split("-")[0] for p in shards("*")})) or "none"
    raise FileNotFoundError(
        f"--data_dir={data_dir}: no {' or '.join(EVAL_SPLITS)} split (it has {have}; "
        f"give {flag}=NAME)"
    )


def images_for_figures(pattern, data_dir, split, image_size, limit, channels=3):
    """--images if given, else the first `limit` images of --data_dir's split."""
    if not pattern:
        if not data_dir:
            raise ValueError("give --images=GLOB_OR_TFRECORD or --data_dir=DATA")
        pattern = os.path.join(data_dir, f"{split}-*.tfrecord")
    return load_images(pattern, image_size, limit, channels)


def model_inputs(model, images):
    """`images` in [-1, 1] (as the figures show them) as `model` takes them: through its
    own input normalisation where it has one (a timm or transformers checkpoint's
    mean and std), else as they are (the authors' [-1, 1])."""
    if model.preprocessing is None:
        return images
    import keras_vit
    from keras_vit.preprocessing import PIXEL_SCALE

    pixels = (np.asarray(images, np.float32) + 1.0) * PIXEL_SCALE
    return np.asarray(keras_vit.preprocess_input(pixels, model.preprocessing))
