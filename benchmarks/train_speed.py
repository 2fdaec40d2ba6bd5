r"""Training speed of one config under each precision and compilation, and the input
pipeline's share of a step: short trainers/pretrain.py runs on this machine.

  python benchmarks/train_speed.py --config=configs/fashion_mnist_hybrid.py \
      --work_dir=WORK [--steps=400] [--output_json=benchmarks/results/train_speed.json]

Variants (each one run, skipped when WORK/<variant>/metrics.json exists):
  float32_xla, float32_no_xla, bfloat16_xla, bfloat16_no_xla  (--config.jit_compile,
      --config.mixed_precision)
  auto                what `jit_compile="auto"` picks here (the trainers' rule,
                      keras_vit.compilation.training_jit_compile), float32
  float32_xla_synthetic  float32 XLA on the stream's first batch repeated
                      (--config.input.synthetic): the step without the input pipeline
Speed is the trainer's train_images_per_second: the median images/s of the
--steps / --interval logged intervals after the first (which holds the compilation). The pipeline's share of a step is
1 - (real input images/s) / (synthetic input images/s), both float32 XLA. Prints a
table and writes JSON naming the machine (benchmarks/machine.py). Measurements, not
pass/fail: run them on a quiet machine, one at a time.
"""

import json
import os

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_benchmarks.machine import describe, machine_info, source_commit
from keras_vit_cli import commands

VARIANTS = {
    "float32_xla": ("--config.jit_compile=True",),
    "float32_no_xla": ("--config.jit_compile=False",),
    "bfloat16_xla": ("--config.mixed_precision=True", "--config.jit_compile=True"),
    "bfloat16_no_xla": ("--config.mixed_precision=True", "--config.jit_compile=False"),
    "auto": (),
    "float32_xla_synthetic": ("--config.jit_compile=True", "--config.input.synthetic=True"),
}

flags.DEFINE_string("config", "configs/fashion_mnist.py", "The trainer config.")
flags.DEFINE_string("data_dir", commands.DEMO_DATA_DIR, "make demo's Fashion-MNIST records.")
flags.DEFINE_string("work_dir", None, "Where the runs go.")
flags.DEFINE_integer("steps", 400, "Steps per run.")
flags.DEFINE_integer("interval", 50, "Steps per logged interval.")
flags.DEFINE_list("variants", list(VARIANTS), "Which variants to run.")
flags.DEFINE_string("output_json", None, "Results file (default WORK/results.json).")
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
        "commit": source_commit(),
        "machine": machine_info(),
        "runs": {},
    }
    for variant in FLAGS.variants:
        command = commands.trainer_command(
            "pretrain",
            FLAGS.config,
            os.path.abspath(FLAGS.data_dir),
            os.path.join(FLAGS.work_dir, variant),
            "--strategy=default",
            f"--config.total_steps={FLAGS.steps}",
            f"--config.checkpoint_every={FLAGS.interval}",
            f"--config.warmup_steps={FLAGS.interval}",
            "--config.evals.test.every=-1",
            *VARIANTS[variant],
        )
        metrics = trainer_runs.run_once(FLAGS.work_dir, variant, command)
        results["runs"][variant] = {
            # the trainer's: the median interval after the first (compilation)
            "images_per_second": metrics["train_images_per_second"],
            "jit_compile": metrics.get("jit_compile"),
            "flags": list(VARIANTS[variant]),
        }
    runs = results["runs"]
    if "float32_xla" in runs and "float32_xla_synthetic" in runs:
        real = runs["float32_xla"]["images_per_second"]
        synthetic = runs["float32_xla_synthetic"]["images_per_second"]
        results["input_pipeline_share"] = 1 - real / synthetic
    print(describe(results["machine"]))
    print(f"{FLAGS.config}, {FLAGS.steps} steps, median of the intervals after the first:")
    for variant, run in runs.items():
        print(
            f"  {variant:24s} {run['images_per_second']:7.0f} images/s"
            f"  (jit_compile: {run['jit_compile']})"
        )
    if "input_pipeline_share" in results:
        print(f"  input pipeline's share of a step: {100 * results['input_pipeline_share']:.1f}%")
    out = FLAGS.output_json or os.path.join(FLAGS.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)


if __name__ == "__main__":
    app.run(main)
