"""Running an OpenVINO model (deploy/openvino_export.py's .xml + .bin) with
OpenVINO's CPU plugin, behind the runtimes' one interface (`deploy/report.py`)."""

import os

import numpy as np

from keras_vit_deploy import serving, timing
from keras_vit_deploy.openvino_packages import (
    RUNTIME_PRECISION_KEY,
    ExportError,
    require,
    versions,
)
from keras_vit_deploy.runtime import NamedOutputRuntime

RUNTIME = "openvino"
DEVICE = "CPU"
# OpenVINO's names of the element types a model is computed in.
PRECISION_NAMES = {"f32": "float32", "bf16": "bfloat16", "f16": "float16"}


class OpenVINOClassifier(NamedOutputRuntime):
    """An OpenVINO model compiled for the CPU. Its `output_name` is the first of
    `serving.OUTPUT_NAMES` the file has (`probabilities` for a classifier ending in
    logits, whose file also has `logits`).

    Args:
        path: the .xml file (its .bin beside it).
        num_threads: inference threads (None: OpenVINO's default, one per core).
        batch_size: the batch the model is compiled at (static shapes, OpenVINO's
            fastest); None: the file's (dynamic, or the batch of a file of one).
        inference_precision: 'f32' or 'bf16', over the file's own (its rt_info,
            `openvino_export.RUNTIME_PRECISION_KEY`); None: the file's, and
            OpenVINO's default for a file without one (bfloat16 on a CPU with
            AVX-512-BF16 or AMX).
    """

    file_format = "openvino"

    def __init__(self, path, num_threads=None, batch_size=None, inference_precision=None):
        ov = require("openvino")
        self.path = os.fspath(path)
        self.num_threads = num_threads
        self.requested_batch = batch_size
        self.core = ov.Core()
        model = self.core.read_model(self.path)
        if len(model.inputs) != 1:
            raise ExportError(f"{path}: {len(model.inputs)} inputs, expected one (images).")
        shape = [d.get_length() if d.is_static else None for d in model.inputs[0].partial_shape]
        if len(shape) != 4 or None in shape[1:]:
            raise ExportError(f"{path}: input shape {shape}, expected (batch, H, W, C).")
        self.output_names = [output.get_any_name() for output in model.outputs]
        main = [name for name in serving.OUTPUT_NAMES if name in self.output_names]
        if not main:
            raise ExportError(
                f"{path}: outputs {self.output_names}, none of {list(serving.OUTPUT_NAMES)}."
            )
        self.output_name = main[0]
        self.input = {
            "name": model.inputs[0].get_any_name(),
            "shape": shape,
            "dtype": model.inputs[0].get_element_type().to_dtype().name,
        }
        self.image_size = (shape[1], shape[2])
        self.channels = shape[3]
        self.batch_size = batch_size or shape[0]
        if batch_size:
            model.reshape({model.inputs[0]: [int(batch_size), *shape[1:]]})
        config = {}
        if num_threads:
            config["INFERENCE_NUM_THREADS"] = int(num_threads)
        self.requested_precision = inference_precision
        if not inference_precision and model.has_rt_info(RUNTIME_PRECISION_KEY):
            inference_precision = model.get_rt_info(RUNTIME_PRECISION_KEY).astype(str)
        if inference_precision:
            config["INFERENCE_PRECISION_HINT"] = inference_precision
        self.compiled = self.core.compile_model(model, DEVICE, config)
        self.request = self.compiled.create_infer_request()
        self.outputs = {output.get_any_name(): output for output in self.compiled.outputs}

    def with_threads(self, num_threads):
        """The same file compiled for `num_threads` threads."""
        return OpenVINOClassifier(
            self.path, num_threads, self.requested_batch, self.requested_precision
        )

    def inference_precision(self):
        """What the CPU plugin computes in ('float32' or 'bfloat16'), as compiled:
        a bfloat16 file runs float32 on a CPU without AVX-512-BF16 or AMX."""
        value = self.compiled.get_property("INFERENCE_PRECISION_HINT").to_string()
        return PRECISION_NAMES.get(value, value)

    def runtime_facts(self):
        """What the report says of the runtime, the file's input and outputs, and the
        precision the CPU computes in."""
        return {
            "runtime": RUNTIME,
            "versions": versions(),
            "device": DEVICE,
            "inference_precision": self.inference_precision(),
            "input": {"shape": self.input["shape"], "dtype": self.input["dtype"]},
            "outputs": self.output_names,
        }

    def _infer(self, pixels):
        """One batch of float32 pixels -> {output name: values}."""
        results = self.request.infer({0: pixels})
        return {name: results[output] for name, output in self.outputs.items()}

    def run(self, pixels, output=None):
        """float (N, H, W, C) pixels in [0, 255] -> `output` (N, ...) float32 (the
        main output by default), in batches of the compiled batch (the last one
        padded with black images), or of 100 at a dynamic batch."""
        pixels = self.checked_pixels(pixels, np.float32)
        output = output or self.output_name
        step = self.batch_size or 100
        rows = []
        for i in range(0, len(pixels), step):
            chunk = pixels[i : i + step]
            count = len(chunk)
            if self.batch_size and count < step:
                chunk = np.concatenate(
                    [chunk, np.zeros((step - count, *chunk.shape[1:]), chunk.dtype)]
                )
            rows.append(np.asarray(self._infer(chunk)[output])[:count])
        return np.concatenate(rows).astype(np.float32)

    def latency_ms(self, pixels, repeats=200, warmup=20):
        """Median and mean milliseconds per run at batch 1 (the compiled batch, if
        set) over `repeats` runs cycling through `pixels` (N, H, W, C), after
        `warmup` (`timing.latency_ms`)."""
        step = self.batch_size or 1
        pixels = np.asarray(pixels, np.float32)
        feeds = [
            np.resize(pixels[i : i + step], (step, *pixels.shape[1:]))
            for i in range(0, max(len(pixels) - step + 1, 1), step)
        ]
        return timing.latency_ms(
            lambda i: self.request.infer({0: feeds[i % len(feeds)]}), repeats, warmup
        )
