"""How long `make demo` trains: the steps that fit its 15 minutes, set-up included,
measured on the machine at hand, under the load it has.

A CPU's kind does not say how fast the demo trains on it: the instruction sets a
virtual machine exposes, the share of the host it gets and the jobs beside it decide.
(An AMD EPYC Zen 4 whose hypervisor showed AVX2 only trained at 664-688 images/s, not
Zen 4's 1,111, and a step count taken from a table of kinds made `make demo` last
18 min 28 s.) So the demo times the machine itself, just before it trains:

1. `calibrate` builds the trainer's own update (trainers/train_step.py's `TrainStep`,
   the config's model, optimizer, loss, precision and XLA choice) on a synthetic batch
   of the config's shape, compiles it, and times it for `CALIBRATION_S` seconds.
   It measures two things: the update's images/s (of the median call: a short
   spell of another job's load does not set the demo's length), and `start_s`, the seconds from
   the calibration's start to the end of its first (compiling) call: the imports, the
   model and XLA's compilation, the same work as the trainer's own start. The decoded
   cache makes the input pipeline's share of a step nil (about 2%, within the noise:
   benchmarks/results/train_speed_fashion_mnist_hybrid_stage2.json), so the synthetic
   batch trains at the trainer's speed.
2. `plan` spends what is left of the budget: the seconds since `make demo` started
   (set-up, records, the calibration itself) are gone; the trainer's start, the final
   evaluations and the exports are charged at this machine's measured speeds
   (`outside_training_s`); `MARGIN` of the rest is kept for the load to change; the
   steps that fit the remainder are trained, in whole `STEP_QUANTUM`s.

The step count is the run's: `save` writes it to RUN/demo_budget.json with the
measurement, and a rerun on the run directory (a resume) trains the same schedule
without measuring again (`load`). `--config.total_steps=N` or `--steps=N` bypass the
budget (tools/demo.py).

The measuring needs TensorFlow (imported in `calibrate` only); the rest is stdlib.
"""

import json
import math
import os
import statistics
import time

BUDGET_S = 900  # the README's promise: `make demo` in 15 minutes, set-up included

# Timed seconds of updates after the compiling one (at least MIN_TIMED_CALLS calls of
# STEPS_PER_CALL updates): under 1% of the demo's budget; the images/s of 8 s of the
# hybrid's steps agree with the trainer's median interval within the load's noise.
CALIBRATION_S = 8.0
MIN_TIMED_CALLS = 3
STEPS_PER_CALL = 5

# What the demo does outside training, charged at the measured speeds. On the slowest
# kind (AMD EPYC Zen, AVX2 only, 408 images/s; docs/demo.md, 2026-12-05) it was: the
# trainer's start until its first step 51 s (imports, the decoded cache, XLA), the final
# evaluations 30 s, the two exports about 60 s, each program's start and the writes
# between them about 40 s.
# - The final evaluations are forward passes: charged as this many training images (30 s
#   at 408 images/s; the test split plain and flipped, 30,000 forward passes).
EVAL_TRAIN_IMAGES = 12_500
# - The rest is start-up work (imports, tracing, XLA, the exports' conversions), which
#   runs at the speed of `start_s`, not of the matmuls: charged as this many times the
#   calibration's measured start. On the 2-core AMD Zen 5 (family 26 model 2,
#   2026-12-07; `python tools/demo.py --budget_s=420`) the demo spent 73 s outside
#   training after a calibration whose start_s was 13.8 s: 5.3 times it, evaluations
#   included; this charges 6 times it plus the evaluations, 94 s.
STARTS_OUTSIDE_TRAINING = 6.0
# The share of the training time kept back: the trainer runs slower than the synthetic
# update (its input pipeline, checkpoints and logging), and the load changes after the
# calibration. On the 2-core AMD Zen 5 (2026-12-07) the median call measured 1,871
# images/s and the demo then trained at 1,713 (9% slower); `--budget_s=300` ended in
# 293 s with an 8% margin, kept by the conservative charge outside training alone.
MARGIN = 0.15

# Step counts are whole multiples of this: the warm-up (a fifteenth) and the
# checkpoints (thirds) are whole steps, and nearby budgets train the same steps.
STEP_QUANTUM = 30

RECORD = "demo_budget.json"  # in the run directory
FASHION_MNIST_CLASSES = 10  # the calibration's classes where the config leaves them to the data


class Speed:
    """The machine as the calibration found it: the update's `images_per_second` and
    `start_s`, the seconds until the first (compiling) update had run."""

    def __init__(self, images_per_second, start_s):
        self.images_per_second = float(images_per_second)
        self.start_s = float(start_s)

    def to_dict(self):
        return {"images_per_second": self.images_per_second, "start_s": self.start_s}


def measure(build, batch_size, *, clock=time.perf_counter, seconds=CALIBRATION_S):
    """Times the updates of `build()`, a function that makes and returns `step(n)`
    (n updates of `batch_size` images each per call): the first call compiles and is
    not timed, then calls run for at least `seconds` and MIN_TIMED_CALLS calls; the
    speed is that of the median call.
    `clock` is read before `build` (the start) and around the timed calls."""
    t0 = clock()
    step = build()
    step(STEPS_PER_CALL)  # traces and compiles
    started = last = clock()
    durations = []
    while len(durations) < MIN_TIMED_CALLS or last - started < seconds:
        step(STEPS_PER_CALL)
        now = clock()
        durations.append(now - last)
        last = now
    # The median call: a few seconds of another job beside it do not set the demo's
    # length (on the 2-core Zen 5, 4 of 25 calls of an otherwise steady 1,650-1,930
    # images/s ran at 1,190-1,370 while other jobs started; the mean of 8 s of calls
    # under such a spell planned for 1,075 images/s and the demo trained at 1,590).
    # A load that lasts is in most calls, hence in the median; MARGIN covers the rest.
    median = statistics.median(durations)
    return Speed(STEPS_PER_CALL * batch_size / max(median, 1e-9), started - t0)


def after_training_s(speed):
    """Seconds of the demo after its training steps at `speed`: the final evaluations,
    the exports, the programs' starts (all but the trainer's own)."""
    return (
        EVAL_TRAIN_IMAGES / speed.images_per_second + (STARTS_OUTSIDE_TRAINING - 1) * speed.start_s
    )


def outside_training_s(speed):
    """Seconds of the demo outside its training steps still to come, once calibrated:
    the trainer's start, then what comes after training."""
    return speed.start_s + after_training_s(speed)


def time_limit_flags(speed, batch_size, started, budget_s=BUDGET_S):
    """The trainer's time limit (trainers/time_limit.py) for a demo that began at
    `started`: the budget's end, with what comes after training (and MARGIN of it) kept
    as the steps of `batch_size` it takes at `speed`, so that it is charged at the pace
    the trainer then sees. A machine that slows down after the calibration (another job started
    beside it) stops training early instead of overrunning: on the 2-core AMD Zen 5
    (2026-12-07) a bare clone's `make demo` calibrated at 2,139 images/s, then trained
    at 1,010 while two other jobs installed and tested, and its 10,620 steps would have
    ended after about 25 minutes. With the limit (no margin on the reserve then), one
    slowed from 1,909 to about 900 images/s by tests beside it stopped at step 6,129 of
    9,390 and ended 2.6 s past its 900 s: the margin since covers that."""
    after = after_training_s(speed) * (1 + MARGIN)
    reserve = math.ceil(after * speed.images_per_second / batch_size)
    return [
        f"--config.time_limit={started + budget_s:.0f}",
        f"--config.time_limit_reserve_steps={reserve}",
        "--config.time_limit_anneal=True",
    ]


def plan(speed, batch_size, budget_s=BUDGET_S, spent_s=0.0):
    """(training steps of `batch_size` that fit what is left of `budget_s` after
    `spent_s` seconds at `speed`, a line saying why). ValueError where nothing is left
    for training."""
    rate = speed.images_per_second
    outside = outside_training_s(speed)
    train_s = (budget_s - spent_s - outside) * (1 - MARGIN)
    count = int(train_s * rate / batch_size) // STEP_QUANTUM * STEP_QUANTUM
    if count < STEP_QUANTUM:
        raise ValueError(
            f"--budget_s={budget_s:g}: {spent_s:.0f} s already spent and {outside:.0f} s "
            f"to come outside training (the trainer's start, evaluations, exports) at this "
            f"machine's measured speed ({rate:.0f} images/s) leave no time to train"
        )
    why = (
        f"{count} steps of {batch_size}: {count * batch_size / rate:.0f} s of training at "
        f"{rate:.0f} images/s, measured here now, in a {budget_s:.0f} s budget "
        f"({spent_s:.0f} s spent, {outside:.0f} s to come outside training)"
    )
    return count, why


def flags(count):
    """The trainer flags of a `count`-step demo: the warm-up a fifteenth of it (the demo
    configs' share), a checkpoint at each third (what a preempted demo resumes from), the
    test split evaluated once, after training (a periodic test evaluation decides
    nothing in the run: each pass over the 10,000 test images costs about 10 s, 30
    steps, on the slowest kind)."""
    return [
        f"--config.total_steps={count}",
        f"--config.warmup_steps={count // 15}",
        f"--config.checkpoint_every={count // 3}",
        "--config.evals.test.every=0",
    ]


def save(run_dir, record):
    """Writes `record` (steps, batch_size, budget_s, the measurement) to
    RUN/demo_budget.json, the run directory made if missing."""
    os.makedirs(run_dir, exist_ok=True)
    with open(os.path.join(run_dir, RECORD), "w") as f:
        json.dump(record, f, indent=1)


def load(run_dir):
    """The record `save` wrote in `run_dir`, or None where there is none. ValueError
    naming the file where it is not a record of a step count."""
    path = os.path.join(run_dir, RECORD)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            record = json.load(f)
        steps = record["steps"]
        if isinstance(steps, int) and steps > 0:  # then what the time limit reads
            Speed(record["images_per_second"], record["start_s"])
            int(record["batch_size"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ValueError(
            f"{path}: not a demo budget record ({e}); remove it to measure again"
        ) from None
    if not isinstance(steps, int) or steps <= 0:
        raise ValueError(f"{path}: steps={steps!r}, expected a positive integer")
    return record


def trainer_step(config, batch_size, overrides=None):
    """`build` for `measure`: a function making `step(n)`, n of the trainer's own updates
    (trainers/train_step.py) of `config`'s model, optimizer, loss, precision and XLA
    choice, its logged metrics and gradient clipping as the pre-training trainer
    resolves them (`overrides`: the command line's
    {dotted key: value}), on the default strategy (the demo's), on one synthetic batch
    of `batch_size` images of the config's size and its classes."""
    given = config

    def build():
        import keras
        import tensorflow as tf

        from keras_vit_trainers import (
            config_checks,
            objectives,
            optimizers,
            train_config,
            train_lib,
        )
        from keras_vit_trainers import strategy as strategy_lib
        from keras_vit_trainers.train_step import TrainStep

        config = train_config.resolve(given, "pretrain", overrides)

        strategy = tf.distribute.get_strategy()
        keras.mixed_precision.set_dtype_policy(
            strategy_lib.dtype_policy(strategy, config.mixed_precision)
        )
        objective = objectives.get(config.objective)
        num_classes = int(config.num_classes or FASHION_MNIST_CLASSES)
        model = objective.build_model(train_lib.model_factory(config), config, num_classes)
        optimizer = optimizers.make_optimizer(config, float(config.learning_rate))
        step = TrainStep(
            model,
            optimizer,
            objective.loss(config),
            objective.train_metrics(config),
            strategy,
            clip_norm=config.get("grad_clip_norm"),
            jit_compile=config_checks.jit_compile(config, strategy),
        )
        step.build()
        size = config.image_size
        height, width = (size, size) if isinstance(size, int) else size
        images = tf.random.stateless_uniform([batch_size, height, width, 3], (0, 1), -1.0, 1.0)
        labels = tf.one_hot(tf.range(batch_size) % num_classes, num_classes)
        batches = tf.data.Dataset.from_tensors((images, labels)).repeat()
        iterator = iter(strategy.experimental_distribute_dataset(batches))

        def run(n):
            step.run(iterator, n)
            step.read_sums()  # waits for the updates, as the trainer's host loop does

        run.train_step = step
        return run

    return build


def _main():
    """`python -m keras_vit_tools.demo_budget --config=PATH [--config.KEY=VALUE ...]`:
    prints the machine's Speed for that config as one JSON line (what tools/demo.py
    reads)."""
    from keras_vit_cli import console

    console.setup()  # before TensorFlow is imported: our lines only

    from absl import app, flags
    from ml_collections import config_flags

    config_flag = config_flags.DEFINE_config_file("config", None, "The demo's config.")

    def run(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        config = config_flag.value
        overrides = config_flags.get_override_values(flags.FLAGS["config"])
        batch = int(overrides.get("batch_size", config.batch_size))
        speed = measure(trainer_step(config, batch, overrides), batch)
        print(json.dumps(speed.to_dict()), flush=True)

    app.run(run)


if __name__ == "__main__":
    _main()
