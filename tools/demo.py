"""The README's main job (`make demo`, or `keras-vit-demo` from any folder with a wheel
install): Fashion-MNIST from scratch with a small hybrid ViT (the installed recipe
fashion_mnist_hybrid; the plain ViT: --config=fashion_mnist).

1. TFRecords in runs/data/fashion_mnist under the current folder (from the Debian IDX
   files, else TFDS), if missing.
2. The pre-training program (`python -m keras_vit_trainers.pretrain`) with --config=CONFIG
   --strategy=default into runs/<the config's name>, runs/fashion_mnist_hybrid by default
   (rerunning resumes / re-exports). The default strategy is the
   fastest on a 2-core CPU: one replica using both cores trained the demo model at 850
   images/s against 720 for two mirrored logical-CPU replicas (Intel Xeon, AVX-512/AMX,
   2026-12-01; on the AMD EPYC 618-787 against 295-326). The mirrored and multi-worker
   paths stay covered by tests/test_train_strategies.py.
3. Exports the trained model: a SavedModel for TF Serving (RUN/export/saved_model/1) and a
   float16 TFLite file checked against the Keras model on the data's test images
   (RUN/export/model_float16.tflite with its report JSON).
4. Prints the test accuracy, the learning curve's path and where everything is.

Usage:
  keras-vit-demo [--model_dir=runs/fashion_mnist_hybrid] [--data_dir=runs/data/fashion_mnist]
                 [--config=fashion_mnist | --config=PATH.py] [--steps=N] [--budget_s=900]
                 [extra trainer flags, e.g. --config.batch_size=64]
  (python tools/demo.py ... in the repository, python -m keras_vit_tools.demo anywhere)

Example, a two-step run (a check that everything works, not a trained model):
  keras-vit-demo --steps=2

--steps=N trains N steps instead of the config's, its warm-up a fifteenth of them, one
checkpoint and one test evaluation at the end (flags given after it still win).

The demo's own recipe trains for what fits 15 minutes, set-up included, on this
machine (tools/demo_budget.py: its CPU kind's measured images/s; 1,740 steps on the
AVX2-only AMD EPYC Zen, 4,680 on AMD Zen 4): --budget_s=SECONDS sets another budget,
--budget_s=0 or --config.total_steps=N trains the config's or N steps.

--config takes an installed recipe's name or a config file's path (keras_vit_configs.find);
every other --config.KEY=VALUE flag goes to the trainer.
"""

import json
import os
import subprocess
import sys
import time

import keras_vit_configs
from keras_vit_cli import commands, console
from keras_vit_tools import demo_budget

# The compute frontier's winner at the demo's budget (docs/training.md); the ViT is
# configs/fashion_mnist.py (--config=fashion_mnist).
DEMO_CONFIG = "fashion_mnist_hybrid"


def _opt(args, name, default):
    for a in list(args):
        if a.startswith(f"--{name}="):
            args.remove(a)
            return a.split("=", 1)[1]
    return default


def short_run(steps):
    """The trainer flags of a `steps`-step run (--steps): the warm-up a fifteenth of it
    (the demo configs' share), one checkpoint and one test evaluation, at the end."""
    return [
        f"--config.total_steps={steps}",
        f"--config.warmup_steps={steps // 15}",
        f"--config.checkpoint_every={steps}",
        "--config.evals.test.every=0",
    ]


def budget_run(args, budget):
    """The trainer flags of the demo's budget (`--budget_s`, default
    demo_budget.BUDGET_S): the steps that fit it at this machine's measured speed."""
    from keras_vit_cli.machine import machine_info

    try:
        budget_s = float(budget or demo_budget.BUDGET_S)
    except ValueError:
        console.fail(f"--budget_s={budget}: expected a number of seconds", console.USAGE)
    batch = _opt(list(args), "config.batch_size", None)
    batch = int(batch or keras_vit_configs.load(DEMO_CONFIG).batch_size)
    try:
        count, why = demo_budget.steps(machine_info(), batch, budget_s)
    except ValueError as e:
        console.fail(str(e), console.USAGE)
    print(f"demo: {why}", flush=True)
    return demo_budget.flags(count)


def _step(cmd, **kwargs):
    """Runs one of the demo's programs; where it fails (its own one line printed), the
    demo exits with its code."""
    code = subprocess.run(cmd, check=False, **kwargs).returncode
    if code:
        sys.exit(code)


def main(argv):
    args = list(argv)
    if console.help_asked(["demo", *args]):
        print(__doc__.strip())
        return None
    given = _opt(args, "config", DEMO_CONFIG)
    steps = _opt(args, "steps", None)
    budget = _opt(args, "budget_s", None)
    if steps is not None:
        if not (steps.isdigit() and int(steps) > 0):
            console.fail(f"--steps={steps}: expected a positive number of steps", console.USAGE)
        args = [*short_run(int(steps)), *args]
    elif (
        budget != "0"
        and given == DEMO_CONFIG
        and _opt(list(args), "config.total_steps", None) is None
    ):
        args = [*budget_run(args, budget), *args]
    data_dir = _opt(args, "data_dir", commands.DEMO_DATA_DIR)
    try:
        config = keras_vit_configs.find(given)  # before any data is written
    except keras_vit_configs.ConfigNotFound as e:
        console.fail(str(e), console.USAGE)
    # One run directory per config, so that a run of another model is never resumed.
    model_dir = _opt(args, "model_dir", os.path.join("runs", keras_vit_configs.run_name(given)))
    # Each step is a program of ours that prints only its own lines (cli/console.py).
    env = console.quiet_environment(dict(os.environ))
    t0 = time.time()
    manifest = os.path.join(data_dir, "manifest.json")
    if not os.path.exists(manifest):
        from keras_vit_data import fashion_mnist, writer  # imports TensorFlow

        source = fashion_mnist.source_name()
        print(f"demo: writing TFRecords ({source}) to {data_dir}", flush=True)
        writer.ensure_records(source, data_dir)
    cmd = commands.trainer_command(
        "pretrain", config, data_dir, model_dir, "--strategy=default", *args
    )
    if given == DEMO_CONFIG:
        print(
            "demo: trains the hybrid (a ResNet stem and stage, then a ViT on 16 tokens): "
            "ahead of the plain ViT at this budget (docs/training.md); the ViT: "
            "--config=fashion_mnist",
            flush=True,
        )
    print("demo: " + " ".join(cmd), flush=True)
    _step(cmd, env=env)
    metrics_path = os.path.join(model_dir, "metrics.json")
    with open(metrics_path) as f:
        metrics = json.load(f)
    export_dir = os.path.join(model_dir, "export")
    saved_model = os.path.join(export_dir, "saved_model", "1")
    tflite = os.path.join(export_dir, "model_float16.tflite")
    report_path = f"{tflite[:-7]}.json"
    for tool, flags in (
        (
            "export_savedmodel",
            [
                f"--run_dir={model_dir}",
                f"--output={saved_model}",
                f"--class_names={manifest}",
            ],
        ),
        (
            "export_tflite",
            [
                f"--saved_model={saved_model}",
                "--quantization=float16",
                f"--output={tflite}",
                f"--report={report_path}",
                "--num_eval_images=500",
                # the data's own test images (Fashion-MNIST's, for the demo's records)
                f"--eval_data={os.path.join(data_dir, 'test-*')}",
            ],
        ),
    ):
        print(f"demo: {tool} {' '.join(flags)}", flush=True)
        _step(commands.tool_command(tool, *flags), env=env, stdout=subprocess.DEVNULL)
    with open(report_path) as f:
        report = json.load(f)
    flip = metrics.get("test_flip_accuracy")  # the recipe's test-time flip (evals.test_flip)
    print(
        f"\nFashion-MNIST test accuracy: {metrics['test_accuracy']:.4f}"
        + (f", {flip:.4f} with test-time flip" if flip is not None else "")
        + f" (step {metrics['step']}, {metrics['train_images_per_second']:.0f} train images/s, "
        f"{time.time() - t0:.0f} s wall)"
    )
    print(
        f"model: {os.path.join(model_dir, 'model.weights.h5')} + "
        f"{os.path.join(model_dir, 'model_config.json')}  "
        f"(keras_vit.VisionTransformer(**config); load_weights)"
    )
    print(
        f"exported: {saved_model} (TF Serving), {tflite} "
        f"({100 * report['top1_agreement']:.1f}% top-1 agreement with Keras)"
    )
    if metrics.get("learning_curve"):
        print(f"learning curve: {metrics['learning_curve']}")
    print(f"metrics: {metrics_path}; TensorBoard: {os.path.join(model_dir, 'tensorboard')}")
    return metrics


if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported (by keras_vit_data): our lines only
    main(sys.argv[1:])
