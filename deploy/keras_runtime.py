"""The Keras model itself behind the runtimes' one interface (`deploy/report.py`):
what the exports are compared with (its outputs) and timed beside (its latency)."""

import os

import numpy as np
import tensorflow as tf

from keras_vit_deploy import serving, timing
from keras_vit_deploy.preprocessing import scale_pixels
from keras_vit_deploy.runtime import Runtime


class KerasClassifier(Runtime):
    """A keras_vit model (or any model `serving.model_outputs` accepts) on [0, 255]
    pixels, returning what its exports return: the softmax of a classifier's
    logits (`output_name` 'probabilities'), else the model's own output.

    Args:
        model: the Keras model, taking (batch, H, W, C) images in [-1, 1].
        batch_size: images per batch in `predict`.
    """

    file_format = "keras"

    def __init__(self, model, batch_size=100):
        spec = serving.model_outputs(model, "the report")
        self.model = model
        self.batch_size = batch_size
        self.softmax = spec.softmax
        self.output_name = "probabilities" if spec.softmax else spec.name
        self.image_size = spec.image_size
        self.channels = spec.channels
        self.preprocessing = getattr(model, "preprocessing", None)  # the model's normalisation
        # The model as Keras' predict runs it: a tf.function over [0, 255] pixels,
        # XLA-compiled where `model.jit_compile` says so (traced once, on first use).
        self.forward = tf.function(
            lambda x: model(scale_pixels(x, self.preprocessing), training=False),
            jit_compile=bool(model.jit_compile),
        )

    def predict(self, pixels):
        """uint8 or float (N, H, W, C) pixels in [0, 255] -> the main output
        (N, ...) float32 (Keras' predict in batches of `batch_size`)."""
        pixels = self.checked_pixels(pixels)
        values = self.model.predict(
            scale_pixels(pixels, self.preprocessing), batch_size=self.batch_size, verbose=0
        )
        values = tf.cast(values, tf.float32)
        return (tf.nn.softmax(values, axis=-1) if self.softmax else values).numpy()

    def latency_ms(self, pixels, repeats=200, warmup=20):
        """The milliseconds per image at batch 1 (`timing.latency_ms`) of `forward`
        under TensorFlow's default thread pools, cycling through `pixels`
        (N, H, W, C) in [0, 255]; with the compilation and the threads used."""
        inputs = [tf.constant(np.asarray(image[None], np.float32)) for image in pixels]
        result = timing.latency_ms(
            lambda i: self.forward(inputs[i % len(inputs)]).numpy(), repeats, warmup
        )
        threads = tf.config.threading.get_intra_op_parallelism_threads()
        return {
            **result,
            "jit_compile": bool(self.model.jit_compile),
            "intra_op_threads": threads or f"TensorFlow's default ({os.cpu_count()} cores)",
        }
