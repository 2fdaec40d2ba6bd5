"""The one interface of the runtimes that run a model on pixels: the TFLite
interpreter (deploy/tflite_runtime.py), onnxruntime (deploy/onnx_runtime.py) and
the Keras model itself (deploy/keras_runtime.py). The report (deploy/report.py)
and the benchmarks compare and time them through it alone."""

import abc

import numpy as np


class Runtime(abc.ABC):
    """A model run by one runtime on (N, H, W, C) pixels in [0, 255].

    Attributes:
        file_format: what the report names the runtime's accuracy after
            ('tflite' -> `tflite_accuracy`, 'onnx' -> `onnx_accuracy`).
        image_size: (H, W) the model takes; channels: its C.
        output_name: what `predict` returns, one of `serving.OUTPUT_NAMES`
            ('probabilities', 'scores', 'features', 'feature_map'; None if unknown).

    A runtime of a file (TFLite, ONNX) also has `with_threads(num_threads)`, the
    same file at another thread count, and `runtime_facts()`, what the report
    says of the runtime and the file's input (`report.build_report`).
    """

    file_format = None
    image_size = None
    channels = None
    output_name = None

    @abc.abstractmethod
    def predict(self, pixels):
        """pixels (N, H, W, C) in [0, 255] -> the main output (N, ...) float32."""

    @abc.abstractmethod
    def latency_ms(self, pixels, repeats=200, warmup=20):
        """`timing.latency_ms`'s {'median_ms', 'mean_ms', 'repeats'} of one image
        at a time, cycling through `pixels` (N, H, W, C), after `warmup` runs."""

    def checked_pixels(self, pixels, dtype=None):
        """`pixels` as an array (of `dtype`, if given); ValueError naming the
        shape unless it is (N, H, W, C) at the runtime's size and channels."""
        pixels = np.asarray(pixels, dtype)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (*self.image_size, self.channels):
            raise ValueError(
                f"pixels must be (N, {self.image_size[0]}, {self.image_size[1]}"
                f", {self.channels}) for this {self.file_format} model, got {pixels.shape}."
            )
        return pixels


class NamedOutputRuntime(Runtime):
    """A runtime of a file with named outputs (ONNX, OpenVINO): `run(pixels, output)`
    gives any of them, `predict` the main one and `logits` the logits."""

    @abc.abstractmethod
    def run(self, pixels, output=None):
        """float (N, H, W, C) pixels in [0, 255] -> `output` (N, ...) float32 (the
        main output, `output_name`, by default)."""

    def predict(self, pixels):
        """pixels (N, H, W, C) in [0, 255] -> the main output (N, ...) float32:
        probabilities (N, K) for a classifier."""
        return self.run(pixels)

    def logits(self, pixels):
        """pixels (N, H, W, C) in [0, 255] -> logits (N, K) float32 (a classifier
        ending in logits)."""
        return self.run(pixels, "logits")
