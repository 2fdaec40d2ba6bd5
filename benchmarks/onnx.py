r"""ONNX files (tools/export_onnx.py's, onnxruntime) against the float32 TFLite file
(deploy/tflite.py) and the Keras model: top-1 agreement, max |delta probability|
against Keras, and latency per image at batch 1.

  python benchmarks/onnx.py [--run_dir=RUN] [--json=/tmp/vit_onnx_bench.json] \
      [--num_eval_images=1000] [--num_ti_images=100] [--latency_repeats=50]

Two models:
- 'fashion_mnist': the demo architecture of configs/fashion_mnist.py (28 px, 10
  classes): the --run_dir run if given (e.g. from `make demo`), else random
  weights (the initialisation, with a random head in place of the zero one so
  that predictions depend on the image); compared on the first --num_eval_images
  Fashion-MNIST test images;
- 'vit_ti16': ViT-Ti/16 at 224 px, 1000 classes, random weights likewise;
  compared on --num_ti_images Fashion-MNIST test images resized to 224 (the
  labels are not its classes: no accuracy).

Latency: each runtime alone at 1 and 2 threads (onnxruntime intra-op threads,
TFLite interpreter threads; Keras under TensorFlow's default pools, as Keras'
predict runs it: a tf.function, XLA where the model asks for it), then all of them
interleaved in --rounds rounds (onnxruntime and TFLite at 1 thread), the
comparison to read. Prints cli/machine.py's line first and writes --json
with "machine". A measurement, not a test: nothing here fails a build.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# `python benchmarks/onnx.py` puts benchmarks/ first on sys.path, where this file
# would shadow the onnx package itself.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: no library noise in the table
os.environ["KERAS_BACKEND"] = "tensorflow"

import json
import tempfile
import time

import keras
import numpy as np
from absl import flags

import keras_vit
from keras_vit_cli.machine import describe, machine_info
from keras_vit_configs import fashion_mnist
from keras_vit_data import fashion_mnist as fashion_mnist_data
from keras_vit_deploy import (
    datasets,
    keras_runtime,
    onnx_export,
    onnx_file,
    onnx_runtime,
    report,
    sources,
    tflite,
    tflite_runtime,
    timing,
)
from keras_vit_deploy.onnx_packages import versions

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "A trained trainers/ run of the Fashion-MNIST model.")
flags.DEFINE_string("json", "/tmp/vit_onnx_bench.json", "Where the results go.")
flags.DEFINE_list("models", ["fashion_mnist", "vit_ti16"], "Which models to measure.")
flags.DEFINE_list("precisions", list(onnx_export.PRECISIONS), "ONNX precisions exported.")
flags.DEFINE_integer("num_eval_images", 1000, "Fashion-MNIST test images (28 px model).")
flags.DEFINE_integer("num_ti_images", 100, "Images (resized to 224) for ViT-Ti/16.")
flags.DEFINE_integer("latency_repeats", 50, "Timed runs per runtime and thread count.")
flags.DEFINE_integer("rounds", 3, "Interleaved rounds (each of --latency_repeats runs).")
flags.DEFINE_string("fashion_mnist_dir", fashion_mnist_data.FASHION_MNIST_DIR, "IDX files.")

FASHION_MNIST_CLASSES = len(fashion_mnist_data.CLASS_NAMES)
WARMUP = 10


def randomize_head(model, seed=0):
    """Replaces the zero-initialised head by N(0, (2 / sqrt(width))**2) weights:
    the pooled features are LayerNorm'd, so the logits have a spread of ~2 and
    the predictions depend on the image."""
    head = model.get_layer("head")
    kernel, bias = head.get_weights()
    rng = np.random.default_rng(seed)
    head.set_weights(
        [rng.normal(0, 2 / np.sqrt(kernel.shape[0]), kernel.shape).astype(kernel.dtype), bias]
    )
    return model


def fashion_mnist_model():
    if FLAGS.run_dir:
        return sources.load_run_dir(FLAGS.run_dir), {"run_dir": FLAGS.run_dir}
    config = fashion_mnist.get_config()
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        image_size=config.image_size,
        num_classes=config.num_classes or FASHION_MNIST_CLASSES,
        name="fashion_mnist_vit",
        **config.model,
    )
    return randomize_head(model), {
        "weights": "random (initialisation, random head)",
        "architecture": dict(config.model),
    }


def vit_ti16_model():
    keras.utils.set_random_seed(0)
    model = keras_vit.build_model("ViT_Ti16", num_classes=1000, image_size=224)
    return randomize_head(model), {"weights": "random (initialisation, random head)"}


def measure(name, model, info, work_dir):
    size = tuple(model.image_size)
    count = FLAGS.num_eval_images if name == "fashion_mnist" else FLAGS.num_ti_images
    pixels, labels = datasets.fashion_mnist_test(size, count, FLAGS.fashion_mnist_dir)
    if model.num_classes != FASHION_MNIST_CLASSES:
        labels = None
    reference = report.keras_reference(model)
    expected = reference(pixels)
    results, runtimes = {}, {}
    for precision in FLAGS.precisions:
        path = os.path.join(work_dir, f"{name}_{precision}.onnx")
        start = time.perf_counter()
        onnx_export.export_keras_model(model, path, precision)
        runtime = onnx_runtime.ONNXClassifier(path)
        results[f"onnx_{precision}"] = {
            "export_seconds": round(time.perf_counter() - start, 1),
            **report.build_report(
                runtime,
                onnx_file.file_facts(path, precision),
                lambda _: expected,
                pixels,
                labels,
                latency_repeats=FLAGS.latency_repeats,
            ),
        }
        runtimes[f"onnx_{precision}"] = runtime.with_threads(1)
    start = time.perf_counter()
    content = tflite.convert_keras_model(model, "none")
    seconds = round(time.perf_counter() - start, 1)
    runtime = tflite_runtime.TFLiteClassifier(content)
    results["tflite_float32"] = {
        "export_seconds": seconds,
        **report.build_report(
            runtime,
            tflite.file_facts(content, "none"),
            lambda _: expected,
            pixels,
            labels,
            latency_repeats=FLAGS.latency_repeats,
        ),
    }
    runtimes["tflite_float32"] = runtime.with_threads(1)
    runtimes["keras"] = keras_runtime.KerasClassifier(model)  # traced (and XLA-compiled) once
    keras_alone = runtimes["keras"].latency_ms(pixels, repeats=FLAGS.latency_repeats)
    results["keras"] = {"latency_per_image": {"default_threads": keras_alone}}
    interleaved = timing.interleaved_ms(
        runtimes, pixels, FLAGS.rounds, FLAGS.latency_repeats, WARMUP
    )
    for key, ms in interleaved.items():
        results[key]["interleaved_ms"] = ms
    return {
        "model": {
            "name": name,
            "image_size": list(size),
            "num_classes": model.num_classes,
            "parameters": int(model.count_params()),
            **info,
        },
        "num_images": int(len(pixels)),
        "runtimes": results,
    }


def main(argv):
    del argv
    builders = {"fashion_mnist": fashion_mnist_model, "vit_ti16": vit_ti16_model}
    unknown = [name for name in FLAGS.models if name not in builders]
    if unknown:
        raise console.UserError(
            f"--models={','.join(FLAGS.models)}: no model {', '.join(unknown)} "
            f"(give {' or '.join(builders)})"
        )
    console.check_output(FLAGS.json, "--json")  # before minutes of measuring, not after
    print(describe(machine_info()), flush=True)
    summary = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv), "models": {}}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="vit_onnx_bench_") as work_dir:
        for name in FLAGS.models:
            model, info = builders[name]()
            summary["models"][name] = measure(name, model, info, work_dir)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    summary["versions"] = versions()
    summary["machine"] = machine_info()  # after the imports: their versions are recorded
    with open(FLAGS.json, "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print_table(summary)


def print_table(summary):
    print(
        "| model | runtime | file (KiB) | top-1 agreement | max abs dprob | ms 1 thread | "
        "ms 2 threads | interleaved ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, measured in summary["models"].items():
        for runtime, result in measured["runtimes"].items():
            latency = result["latency_per_image"]
            if runtime == "keras":
                print(
                    f"| {name} | keras | | | | | {latency['default_threads']['median_ms']:.3f}"
                    f" (default) | {result['interleaved_ms']:.3f} |"
                )
                continue
            print(
                f"| {name} | {runtime} | {result['file_size_bytes'] / 1024:.1f} | "
                f"{result['top1_agreement']:.4f} | {result['max_abs_delta_probability']:.1e} | "
                f"{latency['1_threads']['median_ms']:.3f} | "
                f"{latency['2_threads']['median_ms']:.3f} | {result['interleaved_ms']:.3f} |"
            )
    print(f"{summary['seconds']} s; versions: {summary['versions']}")


if __name__ == "__main__":
    console.run_app(main)
