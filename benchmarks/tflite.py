r"""TFLite variants of a Fashion-MNIST ViT against the Keras model: size, top-1
agreement, max |delta probability|, accuracy and latency (1 and 2 threads).

  python benchmarks/tflite.py [--run_dir=RUN] [--work_dir=/tmp/vit_tflite_bench] \
      [--num_eval_images=1000] [--train_steps=300]

With --run_dir (a trainers/ run, e.g. from `make demo`) that model is used;
otherwise the configs/fashion_mnist.py architecture is trained here with
model.fit on the Fashion-MNIST IDX files for --train_steps (a few CPU minutes).
int8 and int8_matmul are calibrated on TFRecords of the first --num_calibration_images training
images (tools/make_tfrecords.py); the comparison uses the first
--num_eval_images test images. Latency: per variant (1 and 2 threads) as the
export tool's report gives it, and all variants interleaved at 1 thread (5
rounds), which the speed comparison uses. Writes WORK_DIR/summary.json and prints
a table with the issue's targets, both naming the machine (cli/machine.py: CPU
kinds differ up to 4x). A measurement, not a test: nothing here fails a build.
"""

import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["KERAS_BACKEND"] = "tensorflow"

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

import keras
import numpy as np
from absl import flags

import keras_vit
from keras_vit import run_directory
from keras_vit.preprocessing import PIXEL_SCALE
from keras_vit_cli.machine import describe, machine_info
from keras_vit_configs import fashion_mnist
from keras_vit_data import fashion_mnist as fashion_mnist_data
from keras_vit_data import writer
from keras_vit_deploy import datasets, report, serving, sources, tflite, tflite_runtime, timing

FLAGS = flags.FLAGS
flags.DEFINE_string("run_dir", None, "A trained trainers/ run directory to measure.")
flags.DEFINE_string("work_dir", "/tmp/vit_tflite_bench", "Where models and reports go.")
flags.DEFINE_integer("train_steps", 300, "model.fit steps (batch 128) without --run_dir.")
flags.DEFINE_integer("num_eval_images", 1000, "Fashion-MNIST test images compared.")
flags.DEFINE_integer("num_calibration_images", 500, "Training images calibrating int8.")
flags.DEFINE_integer("latency_repeats", 500, "Timed invokes per variant and thread count.")
flags.DEFINE_string("fashion_mnist_dir", fashion_mnist_data.FASHION_MNIST_DIR, "IDX files.")

FASHION_MNIST_CLASSES = len(fashion_mnist_data.CLASS_NAMES)
BATCH_SIZE = 128
# The targets: (min top-1 agreement, size as a fraction of float32).
TARGETS = {"float16": (0.995, 0.5), "dynamic_int8": (0.99, 0.25), "int8": (0.98, None)}


def train_model(run_dir):
    """Trains the demo architecture briefly and saves it as a trainers/ run."""
    config = fashion_mnist.get_config()
    model = keras_vit.VisionTransformer(
        image_size=config.image_size,
        num_classes=config.num_classes or FASHION_MNIST_CLASSES,
        **config.model,
    )
    images, labels = fashion_mnist_data.read_split(FLAGS.fashion_mnist_dir, "train")
    count = min(len(images), FLAGS.train_steps * BATCH_SIZE)
    images, labels = images[:count], labels[:count]
    pixels = np.repeat(images[..., None], 3, axis=-1).astype(np.float32) / PIXEL_SCALE - 1.0
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-3, weight_decay=0.05),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.time()
    model.fit(pixels, labels.astype(np.int64), batch_size=BATCH_SIZE, epochs=1, verbose=2)
    run_directory.RunDirectory(run_dir).write_model(model)
    return {
        "trained_here": True,
        "steps": count // BATCH_SIZE,
        "batch_size": BATCH_SIZE,
        "train_seconds": round(time.time() - start, 1),
    }


def main(argv):
    del argv
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    machine = machine_info()
    run_dir = FLAGS.run_dir or os.path.join(FLAGS.work_dir, "run")
    training = {"run_dir": run_dir}
    if not FLAGS.run_dir:
        training.update(train_model(run_dir))
    model = sources.load_run_dir(run_dir)
    data_dir = os.path.join(FLAGS.work_dir, "tfrecords")
    writer.make_tfrecords(
        "fashion_mnist",
        data_dir,
        splits=["train"],
        max_examples=FLAGS.num_calibration_images,
        progress=False,
        fashion_mnist_dir=FLAGS.fashion_mnist_dir,
    )
    size = tuple(model.image_size)
    calibration, _ = datasets.tfrecord_images(
        os.path.join(data_dir, "train-*"), size, FLAGS.num_calibration_images
    )
    pixels, labels = datasets.fashion_mnist_test(
        size, FLAGS.num_eval_images, FLAGS.fashion_mnist_dir
    )
    saved_model = os.path.join(FLAGS.work_dir, "saved_model")
    serving.export_saved_model(model, saved_model)
    reference = report.keras_reference(model)
    results, contents = {}, {}
    for quantization in tflite.QUANTIZATIONS:
        content = contents[quantization] = tflite.convert_saved_model(
            saved_model, quantization, calibration if quantization in tflite.CALIBRATED else None
        )
        with open(os.path.join(FLAGS.work_dir, f"vit_{quantization}.tflite"), "wb") as f:
            f.write(content)
        results[quantization] = report.build_report(
            tflite_runtime.TFLiteClassifier(content),
            tflite.file_facts(content, quantization),
            reference,
            pixels,
            labels,
            latency_repeats=FLAGS.latency_repeats,
        )
    # The per-report latencies run one variant after another; these interleave
    # them, so the ratios between variants survive a noisy machine.
    classifiers = {
        name: tflite_runtime.TFLiteClassifier(contents[name], num_threads=1) for name in results
    }
    for name, ms in timing.interleaved_ms(classifiers, pixels).items():
        results[name]["interleaved_ms_1_thread"] = ms
    summary = {
        "date": time.strftime("%Y-%m-%d"),
        "command": " ".join(sys.argv),
        "training": training,
        "model": model.get_config(),
        "variants": results,
        "targets": check_targets(results),
        "machine": machine,
    }
    with open(os.path.join(FLAGS.work_dir, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
    print_table(results, summary["targets"], machine)


def check_targets(results):
    """Each target of the issue with the figure reached and whether it is met."""
    base = results["none"]
    checks = {}
    for name, (agreement, size_ratio) in TARGETS.items():
        result = results[name]
        ratio = result["file_size_bytes"] / base["file_size_bytes"]
        checks[name] = {
            "top1_agreement": result["top1_agreement"],
            "agreement_target": agreement,
            "agreement_met": result["top1_agreement"] >= agreement,
            "size_ratio_vs_float32": round(ratio, 3),
        }
        if size_ratio is not None:
            checks[name]["size_ratio_target"] = size_ratio
    for name in tflite.CALIBRATED:
        speedup = base["interleaved_ms_1_thread"] / results[name]["interleaved_ms_1_thread"]
        checks.setdefault(name, {"top1_agreement": results[name]["top1_agreement"]})
        checks[name]["speedup_vs_float32_1_thread"] = round(speedup, 2)
        checks[name]["faster_than_float32"] = speedup > 1.0
    return checks


def print_table(results, targets, machine=None):
    print(describe(machine))
    print(
        "| variant | size (KiB) | vs float32 | top-1 agreement | max abs dprob | "
        "accuracy | ms/image 1 thread | ms/image 2 threads | interleaved ms, 1 thread |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    base = results["none"]["file_size_bytes"]
    for name, result in results.items():
        latency = result["latency_per_image"]
        print(
            f"| {name} | {result['file_size_bytes'] / 1024:.1f} | "
            f"{result['file_size_bytes'] / base:.3f} | {result['top1_agreement']:.4f} | "
            f"{result['max_abs_delta_probability']:.2e} | {result['tflite_accuracy']:.4f} | "
            f"{latency['1_threads']['median_ms']:.3f} | {latency['2_threads']['median_ms']:.3f} | "
            f"{result['interleaved_ms_1_thread']:.3f} |"
        )
    print(f"Keras model accuracy on these images: {results['none']['reference_accuracy']:.4f}")
    print(json.dumps(targets, indent=1))


if __name__ == "__main__":
    console.run_app(main)
