"""Where one inference step of keras_vit goes, op by op, on the TensorFlow backend.

Runs `model.predict_on_batch` (the default path: the compilation keras_vit picks for
this machine and dtype, unless --jit_compile says otherwise) under TensorFlow's
profiler and prints the time of each op type, summed over the traced steps and
divided by their number, largest first, with its share of the step. That is the
profile behind docs/speed.md's "bfloat16 that pays".

    python benchmarks/op_profile.py --variant=ViT_B16 --batch=8 --dtype=mixed_bfloat16

The profiler's op statistics are read by benchmarks/profiler_stats.py, through a private
TensorFlow module (tests/test_profiler_stats.py checks that it still works).
"""

import argparse
import collections
import json
import sys
import tempfile
import time

from keras_vit_cli import console  # noqa: I001  (before TensorFlow: quiet logs)

console.setup()

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_vit.variants import VARIANTS  # noqa: E402
from keras_vit_benchmarks import profiler_stats, speed_models  # noqa: E402
from keras_vit_cli.machine import describe, machine_info  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="ViT_B16", choices=sorted(VARIANTS))
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dtype", default="mixed_bfloat16", choices=("float32", "mixed_bfloat16"))
    parser.add_argument(
        "--jit_compile", default="auto", choices=("auto", "true", "false"), help="as Model.compile"
    )
    parser.add_argument(
        "--call",
        default="predict_on_batch",
        choices=("predict_on_batch", "predict"),
        help="the Keras call timed: one batch, or predict's loop over a 1-batch array",
    )
    parser.add_argument("--steps", type=int, default=3, help="traced steps")
    parser.add_argument("--top", type=int, default=25, help="op types to print")
    parser.add_argument(
        "--ops_of", help="also list each op whose name contains this (e.g. a block's name)"
    )
    parser.add_argument("--json", help="write the table here")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    keras.config.set_dtype_policy(args.dtype)
    arch = VARIANTS[args.variant]
    model = speed_models.keras_vit_model(arch, args.image_size, 1000)
    jit = {"auto": "auto", "true": True, "false": False}[args.jit_compile]
    model.compile(jit_compile=jit)
    shape = (args.batch, args.image_size, args.image_size, 3)
    images = np.random.default_rng(0).uniform(-1, 1, shape).astype("float32")
    if args.call == "predict":

        def step():
            return model.predict(images, batch_size=args.batch, verbose=0)
    else:

        def step():
            return model.predict_on_batch(images)

    for _ in range(2):  # trace and warm up
        step()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    untraced = (time.perf_counter() - start) / args.steps

    logdir = tempfile.mkdtemp(prefix="op_profile_")
    tf.profiler.experimental.start(logdir)
    for _ in range(args.steps):
        step()
    tf.profiler.experimental.stop()

    per_type = collections.defaultdict(float)
    counts = collections.Counter()
    ops = list(profiler_stats.op_stats(logdir))
    for op in ops:
        per_type[op["type"]] += op["total_self_time"] / args.steps
        counts[op["type"]] += op["occurrences"]
    step_us = untraced * 1e6
    print(describe())
    print(
        f"{args.variant} batch {args.batch} {args.dtype} jit_compile={model.jit_compile}: "
        f"{untraced * 1e3:.1f} ms/step untraced, {args.batch / untraced:.2f} images/s"
    )
    rows = sorted(per_type.items(), key=lambda kv: -kv[1])
    print(f"{'op type':<40} {'ms/step':>9} {'share':>7} {'calls':>7}")
    for kind, us in rows[: args.top]:
        calls = int(counts[kind]) // args.steps
        print(f"{kind[:40]:<40} {us / 1e3:9.2f} {us / step_us:7.1%} {calls:7d}")
    if args.ops_of:
        print(f"ops of {args.ops_of!r}:")
        for op in sorted(ops, key=lambda op: -op["total_self_time"]):
            if args.ops_of in op["operation"]:
                ms = op["total_self_time"] / args.steps / 1e3
                print(f"  {ms:8.2f} ms  {op['type']:<24} {op['operation']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "machine": machine_info(),
                    "args": vars(args),
                    "step_ms": untraced * 1e3,
                    "ops_ms": {k: v / 1e3 for k, v in rows},
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
