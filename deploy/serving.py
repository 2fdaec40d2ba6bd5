"""A SavedModel for TF Serving, written through `keras.export.ExportArchive`
(which tracks the model's variables; see docs/design.md, "Export").

What is served follows the model (`model_outputs`; B = batch, K = classes,
D = the feature width):

- a classifier ending in logits (`classifier_activation=None`): `probabilities`
  (B, K) float32, the softmax of the logits;
- a classifier with `classifier_activation='softmax'`: its own `probabilities`
  (no second softmax); with another activation ('sigmoid', ...): `scores` (B, K),
  the activation's output as the model gives it;
- `include_top=False` with a vector output (the representation, or `pooling`
  'token' / 'avg' / 'max'): `features` (B, D);
- `include_top=False, pooling=None`: `feature_map` (B, rows, cols, D), the
  patch tokens on their grid.

Classifiers also return `top_k_classes` (B, k) int32 and `top_k_scores` (B, k)
float32, best first, and `top_k_names` (B, k) tf.string when class names are
given.

Signatures (H x W = the model's image size, C = its input channels), their
names saying what they return (`signature_names`: 'predict' for classifiers,
'features' / 'feature_map' for the headless models):

- `serving_default`: images (B,) tf.string, encoded JPEG/PNG (GIF/BMP too) of
  any size up to `max_pixels` pixels (checked in the image's header before it is
  decoded, data/image_header.py); decoded, brought to C channels
  (`deploy/preprocessing.py`), resized (bilinear) and scaled in the graph as the
  trainer's eval pipeline does.
- `<prefix>_images`: images (B, H, W, C) uint8 pixels.
- `<prefix>_images_float32`: images (B, H, W, C) float32 pixels in [0, 255].
- `<prefix>_examples`: examples (B,) tf.string, serialized tf.train.Example in
  the trainer's format (data/records.py: the encoded image, and optionally int64
  labels); also returns `labels` (B, L) int64, padded with -1.

Loading needs only TensorFlow: `tf.saved_model.load(path).signatures["serving_default"]`.
What the export chose beyond the graph (the pixel limit) is in the SavedModel's
METADATA file (`read_metadata`).
"""

import dataclasses
import json
import numbers
import os

import keras
import tensorflow as tf

from keras_vit_data import image_header
from keras_vit_deploy import preprocessing, require_tensorflow_backend

SERVING_DEFAULT = "serving_default"
# The classifier's signatures (their names for the other kinds: `signature_names`).
PREDICT_IMAGES = "predict_images"
PREDICT_IMAGES_FLOAT32 = "predict_images_float32"
PREDICT_EXAMPLES = "predict_examples"
SIGNATURES = (SERVING_DEFAULT, PREDICT_IMAGES, PREDICT_IMAGES_FLOAT32, PREDICT_EXAMPLES)
# What a model's export returns, by kind: its signatures' prefix.
PREFIXES = {"classifier": "predict", "features": "features", "feature_map": "feature_map"}
# The main output's name, one of these (the classifier's top_k_* come beside it).
OUTPUT_NAMES = ("probabilities", "scores", "features", "feature_map")
_LOGITS = (None, "linear")
# The export's settings, as JSON beside the graph: {"max_pixels": int, "signatures":
# [names]}. assets.extra/ is the SavedModel folder for files that TF Serving leaves alone.
METADATA = os.path.join("assets.extra", "keras_vit_export.json")


@dataclasses.dataclass(frozen=True)
class ModelOutputs:
    """What an export of a model takes and returns (`model_outputs`).

    Attributes:
        kind: 'classifier', 'features' or 'feature_map' (`PREFIXES`).
        name: the main output's name (`OUTPUT_NAMES`).
        softmax: whether the export applies the softmax (the model ends in logits).
        image_size: (H, W); channels: C.
        shape: the main output's shape per image ((K,), (D,) or (rows, cols, D)).
    """

    kind: str
    name: str
    softmax: bool
    image_size: tuple
    channels: int
    shape: tuple

    @property
    def num_classes(self):
        return self.shape[-1] if self.kind == "classifier" else None


def activation_name(activation):
    """A classifier activation's name ('softmax', ...; None for none)."""
    if activation is None or isinstance(activation, str):
        return activation
    return getattr(activation, "__name__", type(activation).__name__)


def model_outputs(model, consumer="the export", error=ValueError):
    """What exporting `model` (a keras_vit model, or any Keras model of one image
    input) gives; `error` (naming `consumer`, e.g. 'the ONNX file') where it
    cannot be exported: not one (batch, H, W, C) input, an input of any size
    (None height or width: the exports are written at one fixed size), or an
    output that is neither (batch, K), (batch, D) nor (batch, rows, cols, D)."""
    inputs = getattr(model, "inputs", None) or []
    outputs = getattr(model, "outputs", None) or []
    if len(inputs) != 1 or len(outputs) != 1:
        raise error(
            f"model '{model.name}' has {len(inputs)} inputs and {len(outputs)} outputs; "
            f"{consumer} takes one image input and one output."
        )
    shape = tuple(inputs[0].shape[1:])
    if len(shape) != 3:
        raise error(
            f"model '{model.name}' takes inputs of shape (batch, "
            f"{', '.join(map(str, shape))}); {consumer} takes images (batch, H, W, C)."
        )
    if shape[0] is None or shape[1] is None:
        raise error(
            f"model '{model.name}' takes images of any size (input size "
            f"{shape[0]} x {shape[1]}); {consumer} is written at one fixed H x W: build "
            "the model at a fixed size for export (image_size=... or input_shape=(H, W, C))."
        )
    if shape[2] is None:
        raise error(f"model '{model.name}' takes images of unknown channels {shape}.")
    out = tuple(outputs[0].shape[1:])
    described = f"(batch, {', '.join(map(str, out))})"
    if None in out:
        raise error(f"model '{model.name}' has an output of unknown shape {described}.")
    out = tuple(int(d) for d in out)
    include_top = getattr(model, "include_top", True)
    if include_top:
        if len(out) != 1:
            raise error(
                f"model '{model.name}' has an output of shape {described}; {consumer} "
                "takes a classifier's (batch, K)."
            )
        activation = activation_name(getattr(model, "classifier_activation", None))
        softmax = activation in _LOGITS
        name = "probabilities" if softmax or activation == "softmax" else "scores"
        kind = "classifier"
    else:
        if len(out) not in (1, 3):
            raise error(
                f"model '{model.name}' has an output of shape {described}; {consumer} "
                "takes features (batch, D) or a feature map (batch, rows, cols, D)."
            )
        kind = name = "features" if len(out) == 1 else "feature_map"
        softmax = False
    return ModelOutputs(kind, name, softmax, (int(shape[0]), int(shape[1])), int(shape[2]), out)


def signature_names(kind):
    """(serving_default, images, images_float32, examples) signature names of a
    model of `kind` ('predict_images', ... for classifiers; 'features_images', ...)."""
    prefix = PREFIXES[kind]
    return (SERVING_DEFAULT, f"{prefix}_images", f"{prefix}_images_float32", f"{prefix}_examples")


class SignatureFunctions:
    """The graph functions behind the signatures, for one model.

    Args:
        model: a keras_vit.VisionTransformer (any head or none, any channels) at
            a fixed image size.
        class_names: None, or one name per class (classifiers only).
        top_k: how many classes the top_k_* outputs hold (at most K).
        max_pixels: the encoded-image signatures refuse an image whose header
            declares more pixels (a positive int).
    """

    def __init__(
        self, model, class_names=None, top_k=5, max_pixels=image_header.DEFAULT_MAX_PIXELS
    ):
        require_tensorflow_backend()
        if not isinstance(max_pixels, numbers.Integral) or isinstance(max_pixels, bool):
            raise ValueError(f"max_pixels={max_pixels!r}: expected a whole number of pixels.")
        if max_pixels < 1:
            raise ValueError(f"max_pixels={max_pixels}: expected a positive number of pixels.")
        self.max_pixels = int(max_pixels)
        self.spec = model_outputs(model, "the served SavedModel")
        self.model = model
        self.image_size = self.spec.image_size
        self.channels = self.spec.channels
        self.num_classes = self.spec.num_classes
        if class_names is not None:
            if self.num_classes is None:
                raise ValueError(
                    f"class names label a classifier's outputs; model '{model.name}' "
                    f"has no head (it returns {self.spec.name})."
                )
            if len(class_names) != self.num_classes:
                raise ValueError(
                    f"{len(class_names)} class names for a model with {self.num_classes} classes."
                )
        self.class_names = list(class_names) if class_names is not None else None
        self.top_k = max(1, min(int(top_k), self.num_classes)) if self.num_classes else None
        self.names = signature_names(self.spec.kind)

    def outputs(self, pixels):
        """float32 (B, H, W, C) pixels in [0, 255] -> the outputs dict."""
        scaled = preprocessing.scale_pixels(pixels, getattr(self.model, "preprocessing", None))
        values = tf.cast(self.model(scaled, training=False), tf.float32)
        if self.spec.softmax:
            values = tf.nn.softmax(values, axis=-1)
        outputs = {self.spec.name: values}
        if self.spec.kind == "classifier":
            scores, classes = tf.math.top_k(values, k=self.top_k)
            outputs.update(top_k_classes=classes, top_k_scores=scores)
            if self.class_names is not None:
                outputs["top_k_names"] = tf.gather(tf.constant(self.class_names), classes)
        return outputs

    def serve_encoded(self, images):
        pixels = preprocessing.decode_images(
            images, self.image_size, self.names[0], self.channels, self.max_pixels
        )
        return self.outputs(pixels)

    def _checked_pixels(self, images, signature):
        checks = [
            preprocessing.assert_pixel_shape(images, self.image_size, signature, self.channels),
            preprocessing.assert_not_empty(images, signature),
        ]
        if images.dtype != tf.uint8:
            with tf.control_dependencies(checks):  # the range of an empty batch is (inf, -inf)
                checks.append(preprocessing.assert_pixel_range(images, signature))
        with tf.control_dependencies(checks):
            return tf.cast(images, tf.float32)

    def serve_pixels(self, images):
        return self.outputs(self._checked_pixels(images, self.names[1]))

    def serve_pixels_float32(self, images):
        return self.outputs(self._checked_pixels(images, self.names[2]))

    def serve_examples(self, examples):
        encoded, labels = preprocessing.parse_examples(examples, self.names[3])
        pixels = preprocessing.decode_images(
            encoded, self.image_size, self.names[3], self.channels, self.max_pixels
        )
        return {**self.outputs(pixels), "labels": labels}

    def endpoints(self):
        """(name, fn, input signature) of every signature."""
        pixels = [None, *self.image_size, self.channels]
        encoded, uint8, float32, examples = self.names
        return [
            (encoded, self.serve_encoded, tf.TensorSpec([None], tf.string, "images")),
            (uint8, self.serve_pixels, tf.TensorSpec(pixels, tf.uint8, "images")),
            (float32, self.serve_pixels_float32, tf.TensorSpec(pixels, tf.float32, "images")),
            (examples, self.serve_examples, tf.TensorSpec([None], tf.string, "examples")),
        ]


def export_saved_model(
    model, output, class_names=None, top_k=5, max_pixels=image_header.DEFAULT_MAX_PIXELS
):
    """Writes the SavedModel with the signatures above to directory `output`, and
    its METADATA. Returns the signature names."""
    functions = SignatureFunctions(model, class_names, top_k, max_pixels)
    archive = keras.export.ExportArchive()
    archive.track(model)
    for name, fn, spec in functions.endpoints():
        archive.add_endpoint(name, fn, input_signature=[spec])
    archive.write_out(output, verbose=False)
    names = [name for name, _, _ in functions.endpoints()]
    path = os.path.join(output, METADATA)
    tf.io.gfile.makedirs(os.path.dirname(path))
    with tf.io.gfile.GFile(path, "w") as f:
        json.dump({"max_pixels": functions.max_pixels, "signatures": names}, f, indent=1)
    return names


def read_metadata(path):
    """The METADATA dict of the SavedModel directory `path`; {} for one exported
    without it."""
    path = os.path.join(path, METADATA)
    if not tf.io.gfile.exists(path):
        return {}
    with tf.io.gfile.GFile(path) as f:
        return json.load(f)


@dataclasses.dataclass(frozen=True)
class LoadedSignatures:
    """The signatures of a SavedModel loaded with tf.saved_model.load
    (`loaded_signatures`): the pixel ones' names, the input size and channels,
    and the main output's name."""

    images: str
    images_float32: str
    examples: str
    image_size: tuple
    channels: int
    output: str


def loaded_signatures(loaded):
    """What a SavedModel written by `export_saved_model` serves, from its
    signatures; ValueError for one that was not."""
    for kind in PREFIXES:
        _, images, images_float32, examples = signature_names(kind)
        if images_float32 in loaded.signatures:
            break
    else:
        raise ValueError(
            f"the SavedModel has no '<prefix>_images_float32' signature (has "
            f"{', '.join(loaded.signatures)}); export it with tools/export_savedmodel.py."
        )
    signature = loaded.signatures[images_float32]
    _, spec = signature.structured_input_signature
    shape = spec["images"].shape
    output = next(name for name in OUTPUT_NAMES if name in signature.structured_outputs)
    return LoadedSignatures(
        images, images_float32, examples, (int(shape[1]), int(shape[2])), int(shape[3]), output
    )


def image_size_of(loaded):
    """(H, W) of a SavedModel loaded with tf.saved_model.load, from the input
    signature of its `<prefix>_images_float32`."""
    return loaded_signatures(loaded).image_size
