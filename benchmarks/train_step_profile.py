r"""What the trainer adds to a bare `model.fit`, and where a training step's time goes.

  python benchmarks/train_step_profile.py --config=configs/fashion_mnist_hybrid.py \
      [--data_dir=runs/data/fashion_mnist] [--work_dir=WORK] [--steps=600] \
      [--interval=150] [--profile_steps=30] [--output=FILE] [--config.KEY=VALUE ...]

One run of each, on this machine, in this order:
  trainer      trainers/pretrain.py itself (a subprocess; the config's recipe, --steps
               steps, warm-up and a checkpoint every --interval, no periodic test
               evaluation):
               everything `make demo` runs while it trains (progress bar, checkpoints,
               NaN guard, preemption watch, logs, the input pipeline);
  bare         in this process, the model trainers/train_lib.build compiles for the
               config (its optimizer and schedule, loss, metrics and compilation
               choice) in a `model.fit` with no callback but a timer, on the trainer's
               own training stream (trainers/train_lib.train_data);
  bare_cached  the same on the stream's first batch held in memory and repeated: the
               step without the input pipeline.
Each speed is the trainer's own measure: the median images/s of the --interval-step
intervals after the first (which holds the compilation). The trainer's overhead is
1 - trainer / bare; the input pipeline's share 1 - bare / bare_cached.

Then the profile: bare_cached again without XLA (XLA compiles the step into clusters
the profiler does not look inside; its images/s is printed beside the others), and
--profile_steps of its steps under TensorFlow's profiler: op time per step by part of
the model (ResNet, patch embedding, attention, MLP, LayerNorm, optimizer, the rest;
forward and backward, from the ops' names) and by op type, with shares of the op time.

Prints tables and writes JSON (default WORK/train_step_profile.json) naming the machine
(cli/machine.py). Measurements, not pass/fail: a quiet machine, one at a time.
"""

import collections
import dataclasses
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time

from keras_vit_cli import console  # noqa: I001  (before TensorFlow: quiet logs)

console.setup()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from absl import app, flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from keras_vit_benchmarks import profiler_stats, trainer_runs  # noqa: E402
from keras_vit_cli import commands  # noqa: E402
from keras_vit_cli.machine import describe, machine_info, source_commit  # noqa: E402

config_flags.DEFINE_config_file("config", None, "A trainer config (configs/*.py).")
flags.DEFINE_string("data_dir", commands.DEMO_DATA_DIR, "make demo's Fashion-MNIST records.")
flags.DEFINE_string("work_dir", None, "Where the trainer's run goes (default: a temporary one).")
flags.DEFINE_integer("steps", 600, "Steps of each run.")
flags.DEFINE_integer(
    "interval", 150, "Steps per timed interval (the trainer's checkpoint interval)."
)
flags.DEFINE_integer("profile_steps", 30, "Steps under the profiler.")
flags.DEFINE_integer("top", 15, "Op types to print.")
flags.DEFINE_string("output", None, "The JSON (default WORK/train_step_profile.json).")
FLAGS = flags.FLAGS


def run_settings():
    """What every run here changes in the config: its length, warm-up and intervals."""
    return dict(
        total_steps=FLAGS.steps, warmup_steps=FLAGS.interval, checkpoint_every=FLAGS.interval
    )


def trainer_speed(work_dir, argv):
    """images/s of trainers/pretrain.py on the config (RunLogger's median), given the
    --config flags of `argv` as they are."""
    given = [a for a in argv if a.startswith("--config")]
    path = next((a.split("=", 1)[1] for a in given if a.startswith("--config=")), None)
    if path is None:
        raise app.UsageError("give the config as --config=FILE")
    command = commands.trainer_command(
        "pretrain",
        path,
        os.path.abspath(FLAGS.data_dir),
        os.path.join(work_dir, "trainer"),
        "--strategy=default",
        *(a for a in given if a.startswith("--config.")),
        *(f"--config.{k}={v}" for k, v in run_settings().items()),
        "--config.evals.test.every=-1",
    )
    return trainer_runs.run_once(work_dir, "trainer", command)["train_images_per_second"]


class IntervalTimer(keras.callbacks.Callback):
    """images/s of each epoch (--interval steps of `batch` images)."""

    def __init__(self, batch):
        super().__init__()
        self.batch = batch

    def on_train_begin(self, logs=None):
        self.rates, self.last = [], time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        now = time.perf_counter()
        self.rates.append(self.batch * FLAGS.interval / (now - self.last))
        self.last = now

    def images_per_second(self):
        """The median interval after the first (the compilation), as the trainer's."""
        return statistics.median(self.rates[1:] or self.rates)


def bare_model(config, jit_compile=None):
    """(model, the training stream, the stream's first batch repeated, batch size) as
    trainers/train_lib.run builds them for FLAGS.steps steps; `jit_compile` None: the
    trainer's choice."""
    from keras_vit_trainers import config_checks, input_pipeline, input_spec, train_lib

    strategy = tf.distribute.get_strategy()
    reader = train_lib.open_data(config, os.path.abspath(FLAGS.data_dir))
    num_classes = config.num_classes or reader.num_classes
    objective = config_checks.check_values(config)
    chosen = config_checks.check(config, strategy, objective)
    keras.utils.set_random_seed(int(config.seed))
    plan = train_lib.Plan(int(config.batch_size), 1, 1, FLAGS.steps, FLAGS.interval, 0, None)
    jit = chosen if jit_compile is None else jit_compile
    optimizer = train_lib.make_optimizer(config, strategy, FLAGS.steps)
    model = train_lib.build(config, strategy, objective, num_classes, plan, None, jit, optimizer)
    spec = input_spec.InputSpec.from_config(config, num_classes, reader.multi_label, objective)
    streams = [
        input_pipeline.train_dataset(reader, s, batch_size=plan.batch)
        for s in (spec, dataclasses.replace(spec, synthetic=True))  # as input.synthetic
    ]
    return model, *streams, plan.batch


def fit_speed(model, data, batch):
    timer = IntervalTimer(batch)
    model.fit(
        data,
        epochs=FLAGS.steps // FLAGS.interval,
        steps_per_epoch=FLAGS.interval,
        callbacks=[timer],
        shuffle=False,
        verbose=0,
    )
    return timer.images_per_second()


# Parts of the step, by the op's name (the first that matches); backward ops are those
# under the gradient tape.
PARTS = (
    ("ResNet (convolutions, GroupNorm)", r"/(root|block\d+)_"),
    ("patch embedding", r"/embedding_"),
    ("attention", r"MultiHeadDotProductAttention"),
    ("MLP", r"MlpBlock"),
    ("LayerNorm", r"LayerNorm|encoder_norm"),
    ("optimizer", r"adam|sgd|optimizer"),
    ("the rest (head, loss, gradient sums, input)", r""),
)


def part_of(operation):
    return next(name for name, pattern in PARTS if re.search(pattern, operation))


def profile(model, data, steps):
    """Op time per step of `steps` steps of model.fit on `data` under TensorFlow's
    profiler: ({op type: ms}, {part: {"forward": ms, "backward": ms}}). Op time is the
    ops' own time summed over both cores' threads: it exceeds the step's wall time
    where ops run side by side."""
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)  # warm
    logdir = tempfile.mkdtemp(prefix="train_step_profile_")
    tf.profiler.experimental.start(logdir)
    model.fit(data, epochs=1, steps_per_epoch=steps, verbose=0)
    tf.profiler.experimental.stop()
    types = collections.defaultdict(float)
    parts = {name: {"forward": 0.0, "backward": 0.0} for name, _ in PARTS}
    for op in profiler_stats.op_stats(logdir):
        ms = op["total_self_time"] / steps / 1e3
        types[op["type"]] += ms
        way = "backward" if "gradient_tape" in op["operation"] else "forward"
        parts[part_of(op["operation"])][way] += ms
    shutil.rmtree(logdir, ignore_errors=True)
    return dict(sorted(types.items(), key=lambda kv: -kv[1])), parts


def print_profile(types, parts):
    total = sum(types.values())
    print(f"op time per step: {total:.1f} ms (both cores' threads)")
    print(f"  {'part':<44} {'forward':>8} {'backward':>9} {'share':>7}")
    for name, ms in parts.items():
        both = ms["forward"] + ms["backward"]
        print(f"  {name:<44} {ms['forward']:8.2f} {ms['backward']:9.2f} {both / total:7.1%}")
    print(f"  {'op type':<44} {'ms/step':>8} {'':>9} {'share':>7}")
    for kind, ms in list(types.items())[: FLAGS.top]:
        print(f"  {kind[:44]:<44} {ms:8.2f} {'':>9} {ms / total:7.1%}")


def main(argv):
    del argv
    if FLAGS.config is None:
        raise app.UsageError("--config is required (e.g. --config=configs/fashion_mnist_hybrid.py)")
    from keras_vit_trainers import train_config

    config = train_config.resolve(
        FLAGS.config, "pretrain", config_flags.get_override_values(FLAGS["config"])
    )
    for key, value in run_settings().items():
        config[key] = value
    work_dir = FLAGS.work_dir or tempfile.mkdtemp(prefix="train_step_profile_")
    machine = machine_info()
    print(describe(machine), flush=True)
    speeds = {"trainer": trainer_speed(work_dir, sys.argv)}
    print(f"trainer: {speeds['trainer']:.0f} images/s", flush=True)
    model, stream, cached, batch = bare_model(config)
    speeds["bare"] = fit_speed(model, stream, batch)
    print(f"bare model.fit: {speeds['bare']:.0f} images/s", flush=True)
    speeds["bare_cached"] = fit_speed(model, cached, batch)
    print(f"bare model.fit, one batch repeated: {speeds['bare_cached']:.0f} images/s", flush=True)
    # XLA compiles the step into clusters the profiler does not look inside: the
    # profile is of the same step op by op.
    model, _, cached, _ = bare_model(config, jit_compile=False)
    speeds["bare_cached_op_by_op"] = fit_speed(model, cached, batch)
    print(f"the same op by op (no XLA): {speeds['bare_cached_op_by_op']:.0f} images/s")
    types, parts = profile(model, cached, FLAGS.profile_steps)
    print_profile(types, parts)
    result = {
        "config": [a for a in sys.argv if a.startswith("--config")],
        "steps": FLAGS.steps,
        "interval": FLAGS.interval,
        "batch_size": batch,
        "images_per_second": speeds,
        "trainer_overhead": 1 - speeds["trainer"] / speeds["bare"],
        "input_pipeline_share": 1 - speeds["bare"] / speeds["bare_cached"],
        "profile_op_by_op": {"parts_ms": parts, "op_types_ms": types},
        "commit": source_commit(),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "machine": machine,
    }
    print(
        f"trainer overhead: {100 * result['trainer_overhead']:.1f}%; "
        f"input pipeline's share: {100 * result['input_pipeline_share']:.1f}%"
    )
    out = FLAGS.output or os.path.join(work_dir, "train_step_profile.json")
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
