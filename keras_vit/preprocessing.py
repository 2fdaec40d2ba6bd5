"""Input scaling and ImageNet class decoding."""

import functools
import os

import numpy as np
from keras import ops

_DATA = os.path.join(os.path.dirname(__file__), "data")
# The official ViT code's input scaling of [0, 255] pixels to [-1, 1]: x / PIXEL_SCALE - 1,
# i.e. (x - 127.5) / 127.5, and back: (x + 1) * PIXEL_SCALE. Its one owner: deploy/ (the
# exported files' in-graph scaling), trainers/ and benchmarks/ import it from here.
PIXEL_SCALE = 127.5


def preprocess_input(images):
    """Scales pixels from [0, 255] to [-1, 1], as the official pipeline:
    x / PIXEL_SCALE - 1, i.e. (x - 127.5) / 127.5.

    Args:
        images: uint8 or float array/tensor (..., height, width, 3) in [0, 255].
    Returns:
        float32 tensor of the same shape in [-1, 1].
    """
    images = ops.cast(images, "float32")
    return images / PIXEL_SCALE - 1.0


@functools.lru_cache(maxsize=None)
def imagenet_classes():
    """The 1000 ImageNet-1k classes in label order: a tuple of (wnid, name)."""
    rows = []
    with open(os.path.join(_DATA, "imagenet1k_classes.txt"), encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                wnid, name = line.rstrip("\n").split("\t")
                rows.append((wnid, name))
    return tuple(rows)


def decode_predictions(predictions, top=5, class_names=None):
    """The `top` classes of each prediction, like keras.applications.

    Args:
        predictions: array (batch, num_classes) of logits or probabilities.
        top: how many classes per image.
        class_names: None for ImageNet-1k (1000 classes, shipped with the
            package), or a sequence of names (e.g. the 21,843 ImageNet-21k class
            names) or a path to a text file with one name per line.
    Returns:
        a list (per image) of lists of (class_id, name, score), best first;
        class_id is the WordNet ID for ImageNet-1k, else the label index.
    """
    predictions = np.asarray(ops.convert_to_numpy(predictions))
    if predictions.ndim != 2:
        raise ValueError(f"predictions must be (batch, num_classes), got {predictions.shape}.")
    if class_names is None:
        if predictions.shape[1] != 1000:
            raise ValueError(
                f"predictions have {predictions.shape[1]} classes; the shipped names cover "
                "ImageNet-1k (1000). Pass class_names for other label sets "
                "(e.g. the ImageNet-21k names)."
            )
        classes = imagenet_classes()
    else:
        if isinstance(class_names, (str, os.PathLike)):
            with open(class_names, encoding="utf-8") as f:
                class_names = [line.rstrip("\n") for line in f if line.strip()]
        if len(class_names) != predictions.shape[1]:
            raise ValueError(
                f"{len(class_names)} class names for predictions with "
                f"{predictions.shape[1]} classes."
            )
        classes = [(str(i), name) for i, name in enumerate(class_names)]
    top = min(int(top), predictions.shape[1])
    order = np.argsort(-predictions, axis=1, kind="stable")[:, :top]
    return [[(*classes[j], float(row[j])) for j in idx] for row, idx in zip(predictions, order)]
