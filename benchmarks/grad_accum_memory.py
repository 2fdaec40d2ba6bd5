r"""Peak host memory of one training step with and without gradient accumulation.

  python benchmarks/grad_accum_memory.py --variant=ViT_B16 --image_size=224 \
      --batch=32 --accum=1,8 [--json=PATH]

Each setting runs in its own process (peak RSS is per process): build the model and
the trainers' optimizer (AdamW) and their training step (trainers/train_step.py TrainStep with
N micro-batches, clipping after the all-reduce, no XLA), run two training steps on
one global batch of `--batch` random images, and read the process's peak resident set
size (`ru_maxrss`) before the first step (model + optimizer state + runtime) and after
the steps. The difference is what the step itself needs: activations and gradients of
one micro-batch (batch / N images) plus the accumulated gradient. Prints a table and
the per-image activation figure used to extrapolate to other batches; names the machine
(cli/machine.py). Measurements, not pass/fail.
"""

import json
import os
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags

from keras_vit_cli.machine import describe, machine_info

flags.DEFINE_string("variant", "ViT_B16", "keras_vit builder name.")
flags.DEFINE_integer("image_size", 224, "Input resolution.")
flags.DEFINE_integer("batch", 32, "Global batch of one update.")
flags.DEFINE_list("accum", ["1", "8"], "Accumulation steps to compare.")
flags.DEFINE_integer("num_classes", 1000, "Head width.")
flags.DEFINE_string("json", None, "Write the results here too.")
flags.DEFINE_integer("child", 0, "Internal: run one setting with this many steps.")
FLAGS = flags.FLAGS


def _peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _child():
    import time

    import keras
    import ml_collections
    import numpy as np

    import keras_vit
    from keras_vit_trainers import optimizers, train_step

    keras.utils.set_random_seed(0)
    model = keras_vit.build_model(
        FLAGS.variant, image_size=FLAGS.image_size, num_classes=FLAGS.num_classes
    )
    config = ml_collections.ConfigDict(
        dict(
            optimizer="adamw",
            beta1=0.9,
            beta2=0.999,
            weight_decay=0.1,
            grad_clip_norm=1.0,
            ema_momentum=0.0,
            momentum=0.9,
        )
    )
    import tensorflow as tf

    step = train_step.TrainStep(
        model,
        optimizers.make_optimizer(config, 1e-4),
        keras.losses.CategoricalCrossentropy(from_logits=True),
        {},
        tf.distribute.get_strategy(),
        accum=FLAGS.child,
        clip_norm=config.grad_clip_norm,
    )
    rng = np.random.default_rng(0)
    size = FLAGS.image_size
    x = rng.uniform(-1, 1, (FLAGS.batch, size, size, 3)).astype("float32")
    y = np.eye(FLAGS.num_classes, dtype="float32")[rng.integers(0, FLAGS.num_classes, FLAGS.batch)]
    step.build()
    batches = iter(tf.data.Dataset.from_tensors((x, y)).repeat())
    before = _peak_mib()
    start = time.perf_counter()
    for _ in range(2):
        step.run(batches, 1)
    seconds = (time.perf_counter() - start) / 2
    print(json.dumps({"before_mib": before, "peak_mib": _peak_mib(), "seconds_per_step": seconds}))


def main(argv):
    del argv
    if FLAGS.child:
        return _child()
    rows = []
    for accum in (int(a) for a in FLAGS.accum):
        cmd = [
            sys.executable,
            os.path.abspath(__file__),
            f"--child={accum}",
            f"--variant={FLAGS.variant}",
            f"--image_size={FLAGS.image_size}",
            f"--batch={FLAGS.batch}",
            f"--num_classes={FLAGS.num_classes}",
        ]
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=True)
        row = json.loads(out.stdout.strip().splitlines()[-1])
        row.update(accum=accum, micro_batch=FLAGS.batch // accum)
        row["step_mib"] = row["peak_mib"] - row["before_mib"]
        rows.append(row)
    machine = machine_info()
    print(describe(machine))
    print(f"{FLAGS.variant}, {FLAGS.image_size} px, global batch {FLAGS.batch}, float32, TF CPU:")
    print("  accum  micro-batch  before step MiB  peak MiB  step needs MiB  s/step")
    for r in rows:
        print(
            f"  {r['accum']:5d}  {r['micro_batch']:11d}  {r['before_mib']:14.0f}  "
            f"{r['peak_mib']:8.0f}  {r['step_mib']:14.0f}  {r['seconds_per_step']:6.1f}"
        )
    if len(rows) >= 2:
        a, b = rows[0], rows[-1]
        per_image = (a["step_mib"] - b["step_mib"]) / (a["micro_batch"] - b["micro_batch"])
        print(f"  activation memory per image in a micro-batch: {per_image:.0f} MiB")
    result = dict(
        variant=FLAGS.variant,
        image_size=FLAGS.image_size,
        batch=FLAGS.batch,
        rows=rows,
        machine=machine,
    )
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    app.run(main)
