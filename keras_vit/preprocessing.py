"""Input scaling and ImageNet class decoding.

A model's input normalisation is its `preprocessing` (a `VisionTransformer`
option, in its config): None for the authors' scaling of [0, 255] pixels to
[-1, 1] (x / PIXEL_SCALE - 1), or {"mean": [...], "std": [...]}, one value per
channel on the [0, 1] pixel scale as timm's `pretrained_cfg` and transformers'
`preprocessor_config.json` state them: (x / PIXEL_MAX - mean) / std.
`preprocess_input(images, preprocessing)` is the one implementation: the
exports (deploy/) call it in their graphs.
"""

import functools
import numbers
import os

import numpy as np
from keras import ops

_DATA = os.path.join(os.path.dirname(__file__), "data")
# The official ViT code's input scaling of [0, 255] pixels to [-1, 1]: x / PIXEL_SCALE - 1,
# i.e. (x - 127.5) / 127.5, and back: (x + 1) * PIXEL_SCALE. Its one owner: deploy/ (the
# exported files' in-graph scaling), trainers/ and benchmarks/ import it from here.
PIXEL_SCALE = 127.5
PIXEL_MAX = 255.0  # the [0, 1] scale's 1, in [0, 255] pixels (timm's and HF's mean/std)
# The authors' scaling as a mean and std on the [0, 1] scale: `check_preprocessing`
# records it as None (computed as x / PIXEL_SCALE - 1).
AUTHORS_MEAN_STD = 0.5


def check_preprocessing(preprocessing, channels=None, where="preprocessing"):
    """A `preprocessing` value, checked and normalised.

    Args:
        preprocessing: None, or a mapping with 'mean' and 'std', each a number or
            one number per channel (the [0, 1] pixel scale); std > 0.
        channels: the model's channel count, which a per-channel list must match
            (None: not checked).
        where: what the value came from, for the error message.
    Returns:
        None where it is None or the authors' scaling (every mean and std 0.5),
        else {"mean": [float, ...], "std": [float, ...]} (one per channel, or a
        single value for all).
    Raises:
        ValueError: a missing key, a non-number, a std <= 0, or a length other
            than 1 or `channels` (named with `where`).
    """
    if preprocessing is None:
        return None
    if not hasattr(preprocessing, "keys") or set(preprocessing) != {"mean", "std"}:
        raise ValueError(
            f"{where} must be None or a dict with exactly 'mean' and 'std', got {preprocessing!r}."
        )
    checked = {}
    for key in ("mean", "std"):
        value = preprocessing[key]
        values = list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value]
        if not values or not all(
            isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values
        ):
            raise ValueError(
                f"{where}['{key}'] must be a number or a list of numbers, got {value!r}."
            )
        if channels is not None and len(values) not in (1, int(channels)):
            raise ValueError(
                f"{where}['{key}'] has {len(values)} values for a model of {channels} channels."
            )
        checked[key] = [float(v) for v in values]
    if not all(v > 0 for v in checked["std"]):
        raise ValueError(f"{where}['std'] must be positive, got {checked['std']}.")
    if all(v == AUTHORS_MEAN_STD for v in checked["mean"] + checked["std"]):
        return None
    return checked


def mean_std(preprocessing, channels):
    """(mean, std): `channels` floats each on the [0, 1] pixel scale, for a
    `preprocessing` value (None: the authors' AUTHORS_MEAN_STD), as timm's
    `pretrained_cfg` and transformers' `image_mean` / `image_std` state them."""
    preprocessing = check_preprocessing(preprocessing, channels)
    if preprocessing is None:
        return [AUTHORS_MEAN_STD] * channels, [AUTHORS_MEAN_STD] * channels
    return tuple(
        preprocessing[key] * (channels // len(preprocessing[key])) for key in ("mean", "std")
    )


def scale_offset(preprocessing):
    """`preprocess_input`'s map as x * scale + offset (a `keras.layers.Rescaling`'s
    arguments, for exporters that take one layer): floats for None (1 / PIXEL_SCALE,
    -1), else float32 arrays per channel: 1 / (PIXEL_MAX * std), -mean / std. Equal
    to `preprocess_input` up to float32 rounding (one or two ulps)."""
    preprocessing = check_preprocessing(preprocessing)
    if preprocessing is None:
        return 1 / PIXEL_SCALE, -1.0
    mean = np.asarray(preprocessing["mean"], "float64")
    std = np.asarray(preprocessing["std"], "float64")
    return (1 / (PIXEL_MAX * std)).astype("float32"), (-mean / std).astype("float32")


def preprocess_input(images, preprocessing=None):
    """Scales [0, 255] pixels to a model's input.

    Args:
        images: uint8 or float array/tensor (..., height, width, channels) in
            [0, 255].
        preprocessing: the model's (`model.preprocessing`): None for the
            official pipeline's x / PIXEL_SCALE - 1, i.e. (x - 127.5) / 127.5,
            into [-1, 1]; or {"mean", "std"} (`check_preprocessing`):
            (x / PIXEL_MAX - mean) / std per channel.
    Returns:
        float32 tensor of the same shape.
    """
    images = ops.cast(images, "float32")
    preprocessing = check_preprocessing(preprocessing)
    if preprocessing is None:
        return images / PIXEL_SCALE - 1.0
    mean = np.asarray(preprocessing["mean"], "float32")
    std = np.asarray(preprocessing["std"], "float32")
    return (images / PIXEL_MAX - mean) / std


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
