r"""The demo's recipe swept at the demo's budget: each point is `make demo`'s config
(fashion_mnist_hybrid) with one or two keys changed, trained for the demo's training
images on 90% of Fashion-MNIST's training images and scored on the held-out tenth
(WORK/data_holdout, tools/make_tfrecords.py --holdout), never on the test split.

  python benchmarks/recipe_sweep.py --work_dir=WORK --steps=N [--points=base,ema,...] [--seeds=0]

  python benchmarks/recipe_sweep.py --table     # the table docs/training.md shows

Every point reports the validation accuracy of the final weights (the EMA's where
EMA is on) as the demo evaluates them, and with test-time flip (the mean of the
logits of each image and its mirror image: the `flip` option of the classification
evaluator). Each point writes benchmarks/results/recipe/<point>_seed<seed>.json as it
finishes (accuracy, images/s, the machine, the commit); a rerun skips every point
whose JSON exists, so the sweep resumes where it stopped.

The points run one after another on the whole machine (two runs at once, each
pinned to one of the 2 cores, trained at 240 images/s each against 1,100 for one run
on both: AMD Zen 4). Measurements, not pass/fail; one seed a point, so differences
under the seeds' spread (about 0.3 points on the test split,
benchmarks/results/demo_accuracy.json) are not resolved.
"""

import os
import time

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info

RESULTS = os.path.join(commands.ROOT, "benchmarks", "results", "recipe")
CONFIG = "fashion_mnist_hybrid"  # tools/demo.py's DEMO_CONFIG at the sweep's time

# name: (axis, what changes, --config overrides). One axis at a time from `base`.
POINTS = {
    "base": ("baseline", "the demo's recipe (AdamW lr 2e-3, batch 128, cosine)", {}),
    "lr_1e-3": ("peak learning rate", "lr 1e-3", dict(learning_rate=1e-3)),
    "lr_4e-3": ("peak learning rate", "lr 4e-3", dict(learning_rate=4e-3)),
    "batch256": (
        "batch size with learning rate",
        "batch 256, lr 4e-3 (half the steps: the same images)",
        dict(batch_size=256, learning_rate=4e-3),
    ),
    "linear": ("schedule", "linear decay", dict(decay_type="linear")),
    "warmup_short": ("schedule", "warm-up 100 steps (of 320)", dict(warmup_steps=100)),
    "wd_0.02": ("weight decay", "0.02 (of 0.05)", dict(weight_decay=0.02)),
    "wd_0.1": ("weight decay", "0.1", dict(weight_decay=0.1)),
    "ls_0": ("label smoothing", "none (of 0.1)", dict(label_smoothing=0.0)),
    "ema": ("EMA of weights", "momentum 0.999", dict(ema_momentum=0.999)),
    "crop": ("augmentation", "pad-4-and-crop", {"input.crop": "random_crop"}),
    "mixup": ("augmentation", "Mixup alpha 0.2", {"input.mixup": 0.2}),
    "randaug": ("augmentation", "RandAugment (2, 5)", {"input.randaug": "randaug(2,5)"}),
}

# Points whose batch is not 128: their share of --steps (the same training images).
STEP_SHARE = {"batch256": 0.5}

flags.DEFINE_string("work_dir", None, "Where the runs and the hold-out records go.")
flags.DEFINE_list("points", None, f"Points (default all: {', '.join(POINTS)}).")
flags.DEFINE_list("seeds", ["0"], "Seeds.")
flags.DEFINE_integer(
    "steps", None, "Steps of batch 128: the demo's on the machine the sweep is for (tools/demo.py)."
)
flags.DEFINE_bool("table", False, "Print the table of the recorded points.")
FLAGS = flags.FLAGS


def overrides(point):
    """The trainer flags of `point`: its keys, with the warm-up, the checkpoint and
    the validation at the config's shares of its steps, the test split never read,
    and the flipped validation as a second evaluator (the `test` one, on `validation`)."""
    keys = dict(POINTS[point][2])
    keys["total_steps"] = steps = round(FLAGS.steps * STEP_SHARE.get(point, 1.0))
    keys.setdefault("warmup_steps", steps // 15)
    keys.update(
        {
            "checkpoint_every": steps,
            "evals.test.split": "validation",
            "evals.test.flip": True,
            "evals.test.every": 0,
        }
    )
    return [f"--config.{k}={v}" for k, v in keys.items()]


def run_point(point, seed, data_dir):
    name = f"{point}_steps{FLAGS.steps}_seed{seed}"
    out = os.path.join(RESULTS, f"{name}.json")
    if os.path.exists(out):
        return
    command = commands.trainer_command(
        "pretrain",
        CONFIG,
        data_dir,
        os.path.join(FLAGS.work_dir, name),
        "--strategy=default",
        f"--config.seed={seed}",
        *overrides(point),
    )
    load_before = os.getloadavg()
    metrics = trainer_runs.run_once(FLAGS.work_dir, name, command)
    axis, label, keys = POINTS[point]
    result = {
        "point": point,
        "axis": axis,
        "label": label,
        "config": CONFIG,
        "keys": keys,
        "seed": seed,
        "steps": metrics["step"],
        "batch_size": metrics["global_batch_size"],
        "epochs": metrics["step"] * metrics["global_batch_size"] / 54_000,
        "validation_accuracy": metrics["validation_accuracy"],
        # The `test` evaluator of the sweep reads the validation split with flip.
        "validation_flip_accuracy": metrics["test_accuracy"],
        "train_images_per_second": metrics["train_images_per_second"],
        "wall_seconds": metrics["wall_seconds"],
    }
    result = trainer_runs.write_point(out, result, load_before)
    print(
        f"[{time.strftime('%H:%M:%S')}] {name}: validation "
        f"{100 * result['validation_accuracy']:.2f}%, with flip "
        f"{100 * result['validation_flip_accuracy']:.2f}%",
        flush=True,
    )


def table():
    """docs/training.md's table: a row a point, in POINTS' order, seeds averaged."""
    points = trainer_runs.load_points(RESULTS)
    if not points:
        raise app.UsageError(f"no points in {RESULTS}")
    base = [p for p in points if p["point"] == "base"]
    base_acc = trainer_runs.mean_std([p["validation_accuracy"] for p in base])[0] if base else None
    print(describe(points[0]["machine"]))
    print("| axis | point | validation | with flip | vs base | seeds |")
    print("|---|---|---|---|---|---|")
    for name, (axis, label, _) in POINTS.items():
        at = [p for p in points if p["point"] == name]
        if not at:
            continue
        plain = trainer_runs.mean_std([p["validation_accuracy"] for p in at])[0]
        flip = trainer_runs.mean_std([p["validation_flip_accuracy"] for p in at])[0]
        delta = "" if base_acc is None else f"{100 * (plain - base_acc):+.2f}"
        seeds = ", ".join(str(p["seed"]) for p in sorted(at, key=lambda p: p["seed"]))
        print(f"| {axis} | {label} | {100 * plain:.2f}% | {100 * flip:.2f}% | {delta} | {seeds} |")


def main(argv):
    del argv
    if FLAGS.table:
        table()
        return
    if not FLAGS.work_dir or not FLAGS.steps:
        raise app.UsageError("--work_dir and --steps are required (or --table)")
    names = FLAGS.points or list(POINTS)
    unknown = sorted(set(names) - set(POINTS))
    if unknown:
        raise app.UsageError(f"--points: unknown {unknown}; known: {', '.join(POINTS)}")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    data_dir = trainer_runs.holdout_records(FLAGS.work_dir)
    todo = [(p, int(s)) for s in FLAGS.seeds for p in names]
    print(f"{describe(machine_info())}\n{len(todo)} points", flush=True)
    for point, seed in todo:
        run_point(point, seed, data_dir)


if __name__ == "__main__":
    app.run(main)
