"""Running a converted classifier with the TFLite interpreter: ai_edge_litert's
where it is installed (tf.lite.Interpreter is deprecated in its favour), else
TensorFlow's."""

import numpy as np
from keras_vit_deploy import timing

try:
    from ai_edge_litert.interpreter import Interpreter as _Interpreter

    INTERPRETER = "ai_edge_litert"
except ImportError:  # TensorFlow's copy, same API
    import tensorflow as tf

    _Interpreter = tf.lite.Interpreter
    INTERPRETER = "tf.lite"


def make_interpreter(content, num_threads=None):
    """An interpreter over a .tflite file's bytes, with the runtime's default
    delegate (XNNPACK on CPU)."""
    return _Interpreter(model_content=bytes(content), num_threads=num_threads)


class TFLiteClassifier:
    """A converted model (tflite.convert_*): one image per invoke. Its output is
    the file's one output: probabilities (or scores) of a classifier, features or
    a feature map (`deploy/serving.py`).

    Args:
        content: the .tflite file's bytes.
        num_threads: interpreter threads (None: the runtime's default).
    """

    def __init__(self, content, num_threads=None):
        self.interpreter = make_interpreter(content, num_threads)
        self.interpreter.allocate_tensors()
        self.input = self.interpreter.get_input_details()[0]
        self.output = self.interpreter.get_output_details()[0]
        self.image_size = tuple(int(s) for s in self.input["shape"][1:3])
        self.channels = int(self.input["shape"][3])
        outputs = [
            name
            for signature in self.interpreter.get_signature_list().values()
            for name in signature["outputs"]
        ]
        # What the file returns ('probabilities', 'features', ...), from its signature.
        self.output_name = outputs[0] if len(outputs) == 1 else None

    def _set_input(self, pixels):
        """pixels: (1, H, W, C) in [0, 255] -> the input tensor, quantised when
        the file takes integers (int8 files take uint8 pixels)."""
        dtype = self.input["dtype"]
        scale, zero_point = self.input["quantization"]
        if np.issubdtype(dtype, np.integer):
            values = np.asarray(pixels, np.float32)
            if scale:
                values = np.round(values / scale + zero_point)
            info = np.iinfo(dtype)
            pixels = np.clip(values, info.min, info.max)
        self.interpreter.set_tensor(self.input["index"], np.asarray(pixels, dtype))

    def _get_output(self):
        values = self.interpreter.get_tensor(self.output["index"])
        scale, zero_point = self.output["quantization"]
        if np.issubdtype(values.dtype, np.integer) and scale:
            return (values.astype(np.float32) - zero_point) * scale
        return values.astype(np.float32)

    def predict(self, pixels):
        """pixels: uint8 (N, H, W, C) -> the output (N, ...) float32: probabilities
        (N, K) for a classifier."""
        pixels = np.asarray(pixels)
        if pixels.ndim != 4 or tuple(pixels.shape[1:]) != (*self.image_size, self.channels):
            raise ValueError(
                f"pixels must be (N, {self.image_size[0]}, {self.image_size[1]}"
                f", {self.channels}) for this file, got {pixels.shape}."
            )
        rows = []
        for image in pixels:
            self._set_input(image[None])
            self.interpreter.invoke()
            rows.append(self._get_output()[0])
        return np.stack(rows)

    def latency_ms(self, pixels, repeats=200, warmup=20):
        """Median and mean milliseconds per invoke (batch 1) over `repeats`
        invokes cycling through `pixels` (N, H, W, C), after `warmup`
        (`timing.latency_ms`; setting the input is not timed)."""
        return timing.latency_ms(
            lambda i: self.interpreter.invoke(),
            repeats,
            warmup,
            prepare=lambda i: self._set_input(pixels[i % len(pixels)][None]),
        )


def interleaved_latency_ms(classifiers, pixels, rounds=5, repeats=100, warmup=10):
    """{name: median over `rounds` of each round's median ms per invoke} for
    {name: TFLiteClassifier}, timed in turn within every round so that a noisy
    machine slows them alike; comparisons between them hold within one call
    (`timing.interleaved_ms`)."""
    timers = {name: classifier.latency_ms for name, classifier in classifiers.items()}
    return timing.interleaved_ms(timers, pixels, rounds, repeats, warmup)
