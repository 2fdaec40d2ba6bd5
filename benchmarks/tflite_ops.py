r"""Where a full-int8 TFLite ViT spends its time: float32 vs int8, per operator kind.

The Python TFLite interpreter has no per-operator profiler, so this builds one
tiny model per kind of work in an encoder block, at a variant's shapes (batch 1,
as a phone runs it), converts each to float32 and to full int8 (calibrated on
random inputs: the ranges do not change the speed), and times `invoke` with the
interpreter the deployment tools use (ai_edge_litert, XNNPACK on, 1 thread by
default). Multiplying by the count per block and the number of blocks gives a
breakdown that adds up to the whole model's latency (compare with
benchmarks/tflite.py or deploy's report).

  python benchmarks/tflite_ops.py --variant=ViT_Ti16 [--image_size=224] \
      [--threads=1] [--repeats=200] [--json=benchmarks/results/tflite_ops.json]

Kinds: layer_norm (x2 per block), fc_qkvo (hidden->hidden, x4: query, key,
value, out), fc_mlp_in (hidden->mlp_dim), fc_mlp_out (mlp_dim->hidden), gelu
(tanh form, on mlp_dim), attention_core (q k^T, softmax, times v, as the model's
fused path exports it), residual_add (x2). Also the machine's int8 capability as
/proc/cpuinfo reports it (avx512_vnni / avx_vnni / amx: int8 dot products).
Then the whole model (random weights, `--whole_model`, on by default) converted
by deploy.tflite as float32 ('none'), full 'int8' and 'int8_matmul', timed
interleaved (deploy.timing.interleaved_ms). The table and the JSON
name the machine (cli/machine.py: CPU kinds differ up to 4x).
A measurement, not a test.
"""

import json
import os
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: our lines only

import keras
import numpy as np
import tensorflow as tf
from absl import flags, logging
from keras import ops

import keras_vit
from keras_vit_cli.machine import describe, machine_info
from keras_vit_deploy import tflite, tflite_runtime, timing

FLAGS = flags.FLAGS
flags.DEFINE_string("variant", "ViT_Ti16", "A keras_vit.VARIANTS name.")
flags.DEFINE_integer("image_size", 224, "Image side in pixels (sets the token count).")
flags.DEFINE_integer("threads", 1, "Interpreter threads.")
flags.DEFINE_integer("repeats", 200, "Timed invokes per model (median reported).")
flags.DEFINE_integer("calibration_samples", 20, "Random calibration inputs for int8.")
flags.DEFINE_bool("whole_model", True, "Also time the whole model per quantisation.")
flags.DEFINE_string("json", None, "Write the breakdown here.")

INT8_DOT_PRODUCT_FLAGS = ("avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "asimddp", "i8mm")


def kinds(arch, tokens):
    """{kind: (count per block, input shapes, builder(inputs) -> output)}."""
    hidden, mlp_dim, heads = arch["hidden_size"], arch["mlp_dim"], arch["num_heads"]
    head_dim = hidden // heads
    rows, wide = (tokens, hidden), (tokens, mlp_dim)
    per_head = (tokens, heads, head_dim)
    return {
        "layer_norm": (2, [rows], lambda x: keras.layers.LayerNormalization(epsilon=1e-6)(x[0])),
        "fc_qkvo": (4, [rows], lambda x: keras.layers.Dense(hidden)(x[0])),
        "fc_mlp_in": (1, [rows], lambda x: keras.layers.Dense(mlp_dim)(x[0])),
        "fc_mlp_out": (1, [wide], lambda x: keras.layers.Dense(hidden)(x[0])),
        "gelu": (1, [wide], lambda x: keras.activations.gelu(x[0], approximate=True)),
        "attention_core": (
            1,
            [per_head] * 3,
            lambda x: ops.dot_product_attention(x[0], x[1], x[2], scale=1.0 / head_dim**0.5),
        ),
        "residual_add": (2, [rows, rows], lambda x: x[0] + x[1]),
    }


def convert(model, shapes, int8):
    """A Keras model -> .tflite bytes (float32, or full int8 with float I/O)."""
    with tempfile.TemporaryDirectory(prefix="tflite_ops_") as directory:
        model.export(directory, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(directory)
        if int8:
            rng = np.random.default_rng(0)
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
            converter.representative_dataset = lambda: (
                [rng.normal(size=(1, *s)).astype("float32") for s in shapes]
                for _ in range(FLAGS.calibration_samples)
            )
            converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        return converter.convert()


def latency_ms(content):
    """Median ms per invoke, and the kinds of operator in the converted graph."""
    runner = tflite_runtime.make_interpreter(content, num_threads=FLAGS.threads)
    runner.allocate_tensors()
    for detail in runner.get_input_details():
        runner.set_tensor(detail["index"], np.zeros(detail["shape"], detail["dtype"]))
    median = timing.latency_ms(lambda i: runner.invoke(), FLAGS.repeats, 10)["median_ms"]
    kinds_present = sorted(
        {op["op_name"] for op in runner._get_ops_details() if op["op_name"] != "DELEGATE"}
    )
    return median, kinds_present


def whole_model_ms(variant, image_size):
    """{quantization: ms per image, 1 image, interleaved} of the whole model."""
    model = keras_vit.build_model(variant, weights=None, num_classes=10, image_size=image_size)
    pixels = (
        np.random.default_rng(0)
        .uniform(0, 255, (FLAGS.calibration_samples, image_size, image_size, 3))
        .astype("float32")
    )
    classifiers = {}
    for quantization in ("none", "int8", "int8_matmul"):
        content = tflite.convert_keras_model(
            model, quantization, pixels if quantization in tflite.CALIBRATED else None
        )
        classifiers[quantization] = tflite_runtime.TFLiteClassifier(content, FLAGS.threads)
    return timing.interleaved_ms(
        classifiers, pixels.astype(np.uint8), repeats=max(FLAGS.repeats // 10, 5)
    )


def cpu_int8_features():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            present = set(handle.read().split())
    except OSError:
        return None
    return [name for name in INT8_DOT_PRODUCT_FLAGS if name in present]


def main(argv):
    del argv
    logging.set_verbosity(logging.WARNING)  # SavedModel export logs per model
    arch = keras_vit.VARIANTS[FLAGS.variant]
    patch = arch["patch_size"]
    patch = patch if isinstance(patch, int) else patch[0]
    tokens = (FLAGS.image_size // patch) ** 2 + 1
    layers = arch["num_layers"]
    rows, totals = {}, {"float32": 0.0, "int8": 0.0}
    machine = machine_info()
    print(describe(machine))
    print(
        f"{FLAGS.variant} at {FLAGS.image_size} px: {tokens} tokens, {layers} blocks, "
        f"{FLAGS.threads} thread(s), interpreter {tflite_runtime.INTERPRETER}"
    )
    print(
        f"{'kind':15s} {'/block':>6s} {'float32 ms':>10s} {'int8 ms':>8s} {'ratio':>6s} "
        f"{'model fp32':>10s} {'model int8':>10s}  int8 graph's operators"
    )
    for kind, (count, shapes, build) in kinds(arch, tokens).items():
        inputs = [keras.Input(shape, batch_size=1) for shape in shapes]
        model = keras.Model(inputs, build(inputs))
        fp32, _ = latency_ms(convert(model, shapes, int8=False))
        int8, int8_ops = latency_ms(convert(model, shapes, int8=True))
        scale = count * layers
        rows[kind] = {
            "per_block": count,
            "float32_ms": fp32,
            "int8_ms": int8,
            "model_float32_ms": fp32 * scale,
            "model_int8_ms": int8 * scale,
            "int8_operators": int8_ops,
        }
        totals["float32"] += fp32 * scale
        totals["int8"] += int8 * scale
        print(
            f"{kind:15s} {count:6d} {fp32:10.3f} {int8:8.3f} {int8 / fp32:6.2f} "
            f"{fp32 * scale:10.1f} {int8 * scale:10.1f}  {', '.join(int8_ops)}",
            flush=True,
        )
    print(
        f"{'blocks in all':15s} {'':6s} {'':10s} {'':8s} {totals['int8'] / totals['float32']:6.2f} "
        f"{totals['float32']:10.1f} {totals['int8']:10.1f}"
    )
    features = cpu_int8_features()
    print(f"CPU int8/bf16 dot-product features: {features if features else 'none'}")
    whole = whole_model_ms(FLAGS.variant, FLAGS.image_size) if FLAGS.whole_model else None
    if whole:
        print(
            "whole model, ms per image: "
            + ", ".join(
                f"{name} {ms:.1f} ({whole['none'] / ms:.2f}x float32's speed)"
                for name, ms in whole.items()
            )
        )
    if FLAGS.json:
        with open(FLAGS.json, "w", encoding="utf-8") as handle:
            json.dump(
                {
                    "variant": FLAGS.variant,
                    "image_size": FLAGS.image_size,
                    "tokens": tokens,
                    "blocks": layers,
                    "threads": FLAGS.threads,
                    "interpreter": tflite_runtime.INTERPRETER,
                    "kinds": rows,
                    "blocks_total_ms": totals,
                    "cpu_int8_features": features,
                    "whole_model_ms": whole,
                    "date": time.strftime("%Y-%m-%d"),
                    "machine": machine,
                },
                handle,
                indent=1,
            )


if __name__ == "__main__":
    console.run_app(main)
