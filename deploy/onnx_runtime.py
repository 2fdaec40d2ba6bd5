"""Running an exported ONNX file (deploy/onnx_export.py) with onnxruntime's CPU
provider, behind the runtimes' one interface (`deploy/report.py`)."""

import os

import numpy as np

from keras_vit_deploy import serving, timing
from keras_vit_deploy.onnx_file import INPUT_NAME
from keras_vit_deploy.onnx_packages import ExportError, require_packages, versions
from keras_vit_deploy.runtime import NamedOutputRuntime

RUNTIME = "onnxruntime"


def _dimension(dim):
    return int(dim) if isinstance(dim, int) else None  # a named (dynamic) axis


class ONNXClassifier(NamedOutputRuntime):
    """An exported model run by onnxruntime's CPU provider. Its `output_name` is
    the first of `serving.OUTPUT_NAMES` the file has (`probabilities` for a
    classifier ending in logits, whose file also has `logits`).

    Args:
        path: the .onnx file.
        num_threads: intra-op threads (None: onnxruntime's default, one per core).
    """

    file_format = "onnx"

    def __init__(self, path, num_threads=None):
        ort = require_packages()["onnxruntime"]
        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only
        if num_threads:
            options.intra_op_num_threads = int(num_threads)
            options.inter_op_num_threads = 1
        self.path = path
        self.session = ort.InferenceSession(
            os.fspath(path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        inputs = self.session.get_inputs()
        if len(inputs) != 1:
            raise ExportError(f"{path}: {len(inputs)} inputs, expected one ({INPUT_NAME}).")
        shape = [_dimension(d) for d in inputs[0].shape]
        dtype = inputs[0].type.removeprefix("tensor(").removesuffix(")")
        self.input = {
            "name": inputs[0].name,
            "shape": shape,
            "dtype": "float32" if dtype == "float" else dtype,
        }
        self.output_names = [output.name for output in self.session.get_outputs()]
        if len(shape) != 4 or None in shape[1:]:
            raise ExportError(f"{path}: input shape {shape}, expected (batch, H, W, C).")
        main = [name for name in serving.OUTPUT_NAMES if name in self.output_names]
        if not main:
            raise ExportError(
                f"{path}: outputs {self.output_names}, none of {list(serving.OUTPUT_NAMES)}."
            )
        self.output_name = main[0]
        self.image_size = (shape[1], shape[2])
        self.channels = shape[3]
        self.batch_size = shape[0]  # None: dynamic

    def with_threads(self, num_threads):
        """The same file in a session of `num_threads` intra-op threads."""
        return ONNXClassifier(self.path, num_threads)

    def runtime_facts(self):
        """What the report says of the runtime and the file's input and outputs."""
        return {
            "runtime": RUNTIME,
            "versions": versions(),
            "input": {"shape": self.input["shape"], "dtype": self.input["dtype"]},
            "outputs": self.output_names,
        }

    def run(self, pixels, output=None):
        """float (N, H, W, C) pixels in [0, 255] -> `output` (N, ...) float32 (the
        main output by default), in batches the file accepts (one image at a time
        for a batch-1 file)."""
        pixels = self.checked_pixels(pixels, np.float32)
        output = output or self.output_name
        step = self.batch_size or 100
        return np.concatenate(
            [
                self.session.run([output], {self.input["name"]: pixels[i : i + step]})[0]
                for i in range(0, len(pixels), step)
            ]
        ).astype(np.float32)

    def latency_ms(self, pixels, repeats=200, warmup=20):
        """Median and mean milliseconds per run at batch 1 over `repeats` runs
        cycling through `pixels` (N, H, W, C), after `warmup` (`timing.latency_ms`)."""
        feeds = [{self.input["name"]: np.asarray(image[None], np.float32)} for image in pixels]
        return timing.latency_ms(
            lambda i: self.session.run([self.output_name], feeds[i % len(feeds)]),
            repeats,
            warmup,
        )
