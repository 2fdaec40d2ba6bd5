r"""Training speed of one config under each precision and compilation, and the input
pipeline's share of a step: short trainers/pretrain.py runs on this machine.

  python benchmarks/train_speed.py --config=configs/fashion_mnist_hybrid.py \
      --work_dir=WORK [--steps=400] [--repeats=1] [--variants=...] \
      [--output_json=benchmarks/results/train_speed.json]

Variants (each --repeats runs, in turn: variant after variant, then again; a run is
skipped when WORK/<variant>[_r<repeat>]/metrics.json exists):
  float32_xla, float32_no_xla, bfloat16_xla, bfloat16_no_xla  (--config.jit_compile,
      --config.mixed_precision)
  auto                what `jit_compile="auto"` picks here (the trainers' rule,
                      keras_vit.compilation.training_jit_compile), float32
  float32_xla_synthetic  float32 XLA on the stream's first batch repeated
                      (--config.input.synthetic): the step without the input pipeline
  float32_xla_records, float32_xla_cache_decoded  float32 XLA with the training
                      records read and decoded every step, or decoded once into memory
                      (--config.input.cache_decoded False / True)
With --baseline_tree (a checkout of another commit: `git worktree add /tmp/base COMMIT`),
each run is followed by the same run of that tree's trainer (`<variant>@baseline`), so
that two versions of the trainer are compared in one run, alternating.
Speed is the trainer's train_images_per_second: the median images/s of the
--steps / --interval logged intervals after the first (which holds the compilation);
with --repeats, the median of the runs' (each run's figure is kept too). The
pipeline's share of a step is 1 - (real input images/s) / (synthetic input images/s),
all float32 XLA: for the config as it is, and with and without the decoded cache. Prints a
table and writes JSON naming the machine (cli/machine.py). Measurements, not
pass/fail: run them on a quiet machine, one at a time.
"""

import itertools
import json
import os
import statistics

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info, source_commit

VARIANTS = {
    "float32_xla": ("--config.jit_compile=True",),
    "float32_no_xla": ("--config.jit_compile=False",),
    "bfloat16_xla": ("--config.mixed_precision=True", "--config.jit_compile=True"),
    "bfloat16_no_xla": ("--config.mixed_precision=True", "--config.jit_compile=False"),
    "auto": (),
    "float32_xla_synthetic": ("--config.jit_compile=True", "--config.input.synthetic=True"),
    "float32_xla_records": ("--config.jit_compile=True", "--config.input.cache_decoded=False"),
    "float32_xla_cache_decoded": (
        "--config.jit_compile=True",
        "--config.input.cache_decoded=True",
    ),
}

flags.DEFINE_string("config", "configs/fashion_mnist.py", "The trainer config.")
flags.DEFINE_string("data_dir", commands.DEMO_DATA_DIR, "make demo's Fashion-MNIST records.")
flags.DEFINE_string("work_dir", None, "Where the runs go.")
flags.DEFINE_integer("steps", 400, "Steps per run.")
flags.DEFINE_integer("interval", 50, "Steps per logged interval.")
flags.DEFINE_list("variants", list(VARIANTS), "Which variants to run.")
flags.DEFINE_integer("repeats", 1, "Runs of each variant, in turn.")
flags.DEFINE_string("output_json", None, "Results file (default WORK/results.json).")
flags.DEFINE_string(
    "baseline_tree", None, "Another checkout whose trainer runs after each run (VARIANT@baseline)."
)
FLAGS = flags.FLAGS


def main(argv):
    del argv
    if not FLAGS.work_dir:
        raise app.UsageError("--work_dir is required")
    unknown = sorted(set(FLAGS.variants) - set(VARIANTS))
    if unknown:
        raise app.UsageError(f"--variants: unknown {unknown}; known: {list(VARIANTS)}")
    results = {
        "config": FLAGS.config,
        "steps": FLAGS.steps,
        "interval": FLAGS.interval,
        "repeats": FLAGS.repeats,
        "commit": source_commit(),
        "machine": machine_info(),
        "runs": {},
    }
    arms = [(v, None) for v in FLAGS.variants]
    if FLAGS.baseline_tree:
        results["baseline_commit"] = source_commit(FLAGS.baseline_tree)
        baseline_env = trainer_runs.other_tree_env(
            FLAGS.baseline_tree, os.path.join(FLAGS.work_dir, "baseline_packages")
        )
        arms = [arm for v in FLAGS.variants for arm in ((v, None), (v, baseline_env))]
    speeds = {}
    for repeat, (variant, env) in itertools.product(range(FLAGS.repeats), arms):
        label = variant if env is None else f"{variant}@baseline"
        name = label if FLAGS.repeats == 1 else f"{label}_r{repeat}"
        config = FLAGS.config
        if env is not None and not os.path.isabs(config):
            config = os.path.join(os.path.abspath(FLAGS.baseline_tree), config)
        command = commands.trainer_command(
            "pretrain",
            config,
            os.path.abspath(FLAGS.data_dir),
            os.path.join(FLAGS.work_dir, name),
            "--strategy=default",
            f"--config.total_steps={FLAGS.steps}",
            f"--config.checkpoint_every={FLAGS.interval}",
            f"--config.warmup_steps={FLAGS.interval}",
            "--config.evals.test.every=-1",
            *VARIANTS[variant],
        )
        cwd = trainer_runs.ROOT if env is None else os.path.abspath(FLAGS.baseline_tree)
        metrics = trainer_runs.run_once(FLAGS.work_dir, name, command, env=env, cwd=cwd)
        # the trainer's: the median interval after the first (compilation)
        speeds.setdefault(label, []).append(metrics["train_images_per_second"])
        results["runs"][label] = {
            "images_per_second": statistics.median(speeds[label]),
            "runs_images_per_second": speeds[label],
            "jit_compile": metrics.get("jit_compile"),
            "flags": list(VARIANTS[variant]),
        }
    runs = results["runs"]
    for key, real in (
        ("input_pipeline_share", "float32_xla"),
        ("input_pipeline_share_records", "float32_xla_records"),
        ("input_pipeline_share_cache_decoded", "float32_xla_cache_decoded"),
    ):
        if real in runs and "float32_xla_synthetic" in runs:
            synthetic = runs["float32_xla_synthetic"]["images_per_second"]
            results[key] = 1 - runs[real]["images_per_second"] / synthetic
    print(describe(results["machine"]))
    print(
        f"{FLAGS.config}, {FLAGS.steps} steps, median of the intervals after the first"
        f"{f' (median of {FLAGS.repeats} runs)' if FLAGS.repeats > 1 else ''}:"
    )
    for variant, run in runs.items():
        each = ", ".join(f"{s:.0f}" for s in run["runs_images_per_second"])
        print(
            f"  {variant:26s} {run['images_per_second']:7.0f} images/s"
            f"  (runs: {each}; jit_compile: {run['jit_compile']})"
        )
    for key in ("input_pipeline_share", "input_pipeline_share_records"):
        if key in results:
            print(f"  input pipeline's share of a step ({key}): {100 * results[key]:.1f}%")
    if "input_pipeline_share_cache_decoded" in results:
        share = results["input_pipeline_share_cache_decoded"]
        print(f"  ... with input.cache_decoded: {100 * share:.1f}%")
    out = FLAGS.output_json or os.path.join(FLAGS.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    app.run(main)
