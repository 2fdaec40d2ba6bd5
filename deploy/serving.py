"""A SavedModel for TF Serving, written through `keras.export.ExportArchive`
(which tracks the model's variables; see docs/design.md, "Export").

Signatures (B = batch, H x W = the model's image size, K = classes):

- `serving_default`: images (B,) tf.string, encoded JPEG/PNG (GIF/BMP too) of
  any size, grayscale or RGB; decoded, resized (bilinear) and scaled in the
  graph as the trainer's eval pipeline does.
- `predict_images`: images (B, H, W, 3) uint8 pixels.
- `predict_images_float32`: images (B, H, W, 3) float32 pixels in [0, 255].
- `predict_examples`: examples (B,) tf.string, serialized tf.train.Example with
  'image/encoded' (bytes) and optionally 'image/class/label' (int64); also
  returns `labels` (B, L) int64, padded with -1.

Each returns `probabilities` (B, K) float32 (softmax of the logits),
`top_k_classes` (B, k) int32 and `top_k_scores` (B, k) float32, best first, and
`top_k_names` (B, k) tf.string when class names are given. Loading needs only
TensorFlow: `tf.saved_model.load(path).signatures["serving_default"]`.
"""

import keras
import tensorflow as tf

from deploy import preprocessing, require_tensorflow_backend, sources

SERVING_DEFAULT = "serving_default"
PREDICT_IMAGES = "predict_images"
PREDICT_IMAGES_FLOAT32 = "predict_images_float32"
PREDICT_EXAMPLES = "predict_examples"
SIGNATURES = (SERVING_DEFAULT, PREDICT_IMAGES, PREDICT_IMAGES_FLOAT32, PREDICT_EXAMPLES)


class Classifier:
    """The graph functions behind the signatures, for one model.

    Args:
        model: a keras_vit.VisionTransformer with a head (logits output).
        class_names: None, or one name per class.
        top_k: how many classes the top_k_* outputs hold (at most K).
    """

    def __init__(self, model, class_names=None, top_k=5):
        require_tensorflow_backend()
        sources.require_logits(model, "a served classifier")
        channels = int(model.inputs[0].shape[-1])
        if channels != 3:
            raise ValueError(
                f"model '{model.name}' takes {channels}-channel images; the "
                "served signatures decode and feed RGB (3 channels). "
                "Export an RGB model (its weights adapt: input_shape=(H, W, 3))."
            )
        self.model = model
        self.image_size = tuple(int(s) for s in model.inputs[0].shape[1:3])
        self.num_classes = int(model.outputs[0].shape[-1])
        if class_names is not None and len(class_names) != self.num_classes:
            raise ValueError(
                f"{len(class_names)} class names for a model with {self.num_classes} classes."
            )
        self.class_names = list(class_names) if class_names is not None else None
        self.top_k = max(1, min(int(top_k), self.num_classes))

    def classify(self, pixels):
        """float32 (B, H, W, 3) pixels in [0, 255] -> the outputs dict."""
        logits = self.model(preprocessing.scale_pixels(pixels), training=False)
        probabilities = tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)
        scores, classes = tf.math.top_k(probabilities, k=self.top_k)
        outputs = {"probabilities": probabilities, "top_k_classes": classes, "top_k_scores": scores}
        if self.class_names is not None:
            outputs["top_k_names"] = tf.gather(tf.constant(self.class_names), classes)
        return outputs

    def serve_encoded(self, images):
        pixels = preprocessing.decode_images(images, self.image_size, SERVING_DEFAULT)
        return self.classify(pixels)

    def _checked_pixels(self, images, signature):
        checks = [
            preprocessing.assert_pixel_shape(images, self.image_size, signature),
            preprocessing.assert_not_empty(images, signature),
        ]
        if images.dtype != tf.uint8:
            with tf.control_dependencies(checks):  # the range of an empty batch is (inf, -inf)
                checks.append(preprocessing.assert_pixel_range(images, signature))
        with tf.control_dependencies(checks):
            return tf.cast(images, tf.float32)

    def predict_images(self, images):
        return self.classify(self._checked_pixels(images, PREDICT_IMAGES))

    def predict_images_float32(self, images):
        return self.classify(self._checked_pixels(images, PREDICT_IMAGES_FLOAT32))

    def predict_examples(self, examples):
        encoded, labels = preprocessing.parse_examples(examples, PREDICT_EXAMPLES)
        pixels = preprocessing.decode_images(encoded, self.image_size, PREDICT_EXAMPLES)
        return {**self.classify(pixels), "labels": labels}

    def endpoints(self):
        """(name, fn, input signature) of every signature."""
        pixels = [None, *self.image_size, 3]
        return [
            (SERVING_DEFAULT, self.serve_encoded, tf.TensorSpec([None], tf.string, "images")),
            (PREDICT_IMAGES, self.predict_images, tf.TensorSpec(pixels, tf.uint8, "images")),
            (
                PREDICT_IMAGES_FLOAT32,
                self.predict_images_float32,
                tf.TensorSpec(pixels, tf.float32, "images"),
            ),
            (PREDICT_EXAMPLES, self.predict_examples, tf.TensorSpec([None], tf.string, "examples")),
        ]


def export_saved_model(model, output, class_names=None, top_k=5):
    """Writes the SavedModel with the signatures above to directory `output`.
    Returns the signature names."""
    classifier = Classifier(model, class_names, top_k)
    archive = keras.export.ExportArchive()
    archive.track(model)
    for name, fn, spec in classifier.endpoints():
        archive.add_endpoint(name, fn, input_signature=[spec])
    archive.write_out(output, verbose=False)
    return [name for name, _, _ in classifier.endpoints()]


def image_size_of(loaded):
    """(H, W) of a SavedModel loaded with tf.saved_model.load, from the input
    signature of `predict_images_float32`."""
    if PREDICT_IMAGES_FLOAT32 not in loaded.signatures:
        raise ValueError(
            f"the SavedModel has no '{PREDICT_IMAGES_FLOAT32}' signature "
            f"(has {', '.join(loaded.signatures)}); export it with "
            "tools/export_savedmodel.py."
        )
    _, spec = loaded.signatures[PREDICT_IMAGES_FLOAT32].structured_input_signature
    shape = spec["images"].shape
    return int(shape[1]), int(shape[2])
