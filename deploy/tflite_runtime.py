"""Running a converted classifier (deploy/tflite.py) with the TFLite interpreter,
behind the runtimes' one interface (`deploy/report.py`): ai_edge_litert's where it
is installed (tf.lite.Interpreter is deprecated in its favour), else TensorFlow's."""

import numpy as np

from keras_vit_deploy import timing
from keras_vit_deploy.runtime import Runtime

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


class TFLiteClassifier(Runtime):
    """A converted model (tflite.convert_*): one image per invoke. Its output is
    the file's one output: probabilities (or scores) of a classifier, features or
    a feature map (`deploy/serving.py`).

    Args:
        content: the .tflite file's bytes.
        num_threads: interpreter threads (None: the runtime's default).
    """

    file_format = "tflite"

    def __init__(self, content, num_threads=None):
        self.content = bytes(content)
        self.interpreter = make_interpreter(self.content, num_threads)
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

    def with_threads(self, num_threads):
        """The same file in an interpreter of `num_threads` threads."""
        return TFLiteClassifier(self.content, num_threads)

    def runtime_facts(self):
        """What the report says of the interpreter and the file's input."""
        return {
            "interpreter": INTERPRETER,
            "input": {
                "shape": [int(s) for s in self.input["shape"]],
                "dtype": np.dtype(self.input["dtype"]).name,
            },
        }

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
        pixels = self.checked_pixels(pixels)
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
