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
                 [--started=SECONDS]
                 [extra trainer flags, e.g. --config.batch_size=64]
  (python tools/demo.py ... in the repository, python -m keras_vit_tools.demo anywhere)

Example, a two-step run (a check that everything works, not a trained model):
  keras-vit-demo --steps=2

--steps=N trains N steps instead of the config's, its warm-up a fifteenth of them, one
checkpoint and one test evaluation at the end (flags given after it still win).

The demo's own recipe trains for what fits 15 minutes, set-up included, on this
machine under its present load (tools/demo_budget.py): it times the trainer's own
update on this machine for a few seconds, then trains the steps that fit what is left
once the set-up, the records, the trainer's start, the evaluations and the exports are
counted. The step count goes to RUN/demo_budget.json, and a rerun on the run (a
resume) keeps it. --started=SECONDS (seconds since 1970; `make demo` gives its own
start) counts the time before this program from then; --budget_s=SECONDS sets another
budget; --budget_s=0 or --config.total_steps=N trains the config's or N steps.

At the end it prints what to run next: serve the SavedModel and ask it, export to
TFLite int8, ONNX and OpenVINO, and fine-tune from the run (--init=RUN).

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


def calibrate(config_flags, config=DEMO_CONFIG):
    """This machine's speed (demo_budget.Speed) for `config` (default the demo's) with
    `config_flags` (--config.KEY=VALUE), measured in a program of its own (`python -m
    keras_vit_tools.demo_budget`), so that its TensorFlow and model leave with it."""
    cmd = commands.tool_command(
        "demo_budget", f"--config={keras_vit_configs.find(config)}", *config_flags
    )
    env = console.quiet_environment(dict(os.environ))
    out = subprocess.run(cmd, check=False, env=env, stdout=subprocess.PIPE, text=True)
    if out.returncode:
        sys.exit(out.returncode)
    return demo_budget.Speed(**json.loads(out.stdout.strip().splitlines()[-1]))


def budget_run(args, budget, model_dir, started, measure=None):
    """The trainer flags of the demo's budget (`--budget_s`, default
    demo_budget.BUDGET_S, counted from `started`, the time.time() at which `make demo`
    began): the steps that fit it at this machine's speed, measured now (`measure`:
    the --config.KEY=VALUE flags -> demo_budget.Speed; default `calibrate`), or the steps that
    `model_dir`'s run chose at its start (RUN/demo_budget.json), so that a resumed run
    keeps its schedule; and a time limit, so that a machine that slows down later
    still ends within the budget (training stops early, its step saved)."""
    try:
        budget_s = float(budget or demo_budget.BUDGET_S)
    except ValueError:
        console.fail(f"--budget_s={budget}: expected a number of seconds", console.USAGE)
    try:
        record = demo_budget.load(model_dir)
    except ValueError as e:
        console.fail(str(e), console.USAGE)
    if record is not None:
        count, batch = record["steps"], record["batch_size"]
        print(
            f"demo: {count} steps of {batch}, the schedule this run chose "
            f"at its start ({os.path.join(model_dir, demo_budget.RECORD)})",
            flush=True,
        )
        speed = demo_budget.Speed(record["images_per_second"], record["start_s"])
    else:
        count, batch, speed = _measured_plan(args, model_dir, started, budget_s, measure)
    return demo_budget.flags(count) + demo_budget.time_limit_flags(speed, batch, started, budget_s)


def _measured_plan(args, model_dir, started, budget_s, measure):
    """(steps, batch size, demo_budget.Speed) of a new run: this machine measured now, the
    steps that fit what is left of `budget_s`, recorded in RUN/demo_budget.json."""
    batch = _opt(list(args), "config.batch_size", None)
    batch = int(batch or keras_vit_configs.load(DEMO_CONFIG).batch_size)
    print(f"demo: timing this machine's training step (batch {batch})", flush=True)
    speed = (measure or calibrate)([a for a in args if a.startswith("--config.")])
    spent = time.time() - started
    try:
        count, why = demo_budget.plan(speed, batch, budget_s, spent)
    except ValueError as e:
        console.fail(str(e), console.USAGE)
    print(f"demo: {why}", flush=True)
    from keras_vit_cli.machine import describe, machine_info

    demo_budget.save(
        model_dir,
        {
            "steps": count,
            "batch_size": batch,
            "budget_s": budget_s,
            "spent_s": round(spent, 1),
            **speed.to_dict(),
            "machine": describe(machine_info()),
            "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
        },
    )
    return count, batch, speed


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
    started = _opt(args, "started", None)  # make demo's start (Makefile), seconds since 1970
    try:
        started = time.time() if started is None else float(started)
    except ValueError:
        console.fail(f"--started={started}: expected seconds since 1970 (date +%s)", console.USAGE)
    data_dir = _opt(args, "data_dir", commands.DEMO_DATA_DIR)
    try:
        config = keras_vit_configs.find(given)  # before any data is written
    except keras_vit_configs.ConfigNotFound as e:
        console.fail(str(e), console.USAGE)
    # One run directory per config, so that a run of another model is never resumed.
    model_dir = _opt(args, "model_dir", os.path.join("runs", keras_vit_configs.run_name(given)))
    if steps is not None and not (steps.isdigit() and int(steps) > 0):
        console.fail(f"--steps={steps}: expected a positive number of steps", console.USAGE)
    # Each step is a program of ours that prints only its own lines (cli/console.py).
    env = console.quiet_environment(dict(os.environ))
    manifest = os.path.join(data_dir, "manifest.json")
    if not os.path.exists(manifest):
        from keras_vit_data import fashion_mnist, writer  # imports TensorFlow

        source = fashion_mnist.source_name()
        print(f"demo: writing TFRecords ({source}) to {data_dir}", flush=True)
        writer.ensure_records(source, data_dir)
    if steps is not None:
        args = [*short_run(int(steps)), *args]
    elif (
        budget != "0"
        and given == DEMO_CONFIG
        and _opt(list(args), "config.total_steps", None) is None
    ):  # after the records: their time is spent too
        args = [*budget_run(args, budget, model_dir, started), *args]
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
        f"{time.time() - started:.0f} s wall)"
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
    print(
        f"\nnext (the programs are in {os.path.dirname(sys.executable)}; docs/deployment.md, "
        "docs/finetune_your_images.md):"
    )
    for what, command in next_commands(model_dir, data_dir):
        print(f"  {what}:\n    {command}")
    return metrics


def next_commands(model_dir, data_dir):
    """[(what, command line)]: what a user runs next on the demo's run `model_dir`
    (records in `data_dir`): serve it with TF Serving and ask it, export it to the other
    formats, fine-tune from it on their own images."""
    export = os.path.join(model_dir, "export")
    saved_model = os.path.join(export, "saved_model", "1")
    return [
        (
            "serve the SavedModel (TF Serving's Docker image), then ask it",
            "docker run -p 8501:8501 --mount type=bind,source="
            f'"{os.path.abspath(os.path.dirname(saved_model))}",target=/models/vit '
            "-e MODEL_NAME=vit "
            "tensorflow/serving\n    python -m keras_vit_tools.serve_request "
            "--url=http://localhost:8501/v1/models/vit:predict IMAGE.png",
        ),
        (
            "an int8 TFLite file",
            f"keras-vit-export-tflite --saved_model={saved_model} --quantization=int8_matmul "
            f"--representative_data='{os.path.join(data_dir, 'train-*')}' "
            f"--output={os.path.join(export, 'model_int8.tflite')}",
        ),
        (
            "ONNX (the onnx extra: pip install -e '.[onnx]')",
            f"keras-vit-export-onnx --run_dir={model_dir} "
            f"--output={os.path.join(export, 'model.onnx')}",
        ),
        (
            "OpenVINO (the openvino extra: pip install -e '.[openvino]')",
            f"keras-vit-export-openvino --saved_model={saved_model} "
            f"--output={os.path.join(export, 'openvino', 'model.xml')}",
        ),
        (
            "fine-tune it on your images (a folder of class folders)",
            "keras-vit-make-tfrecords --source=folder:MY_IMAGES --output_dir=my_records "
            f"--holdout=0.1\n    keras-vit-finetune --config={DEMO_CONFIG} --init={model_dir} "
            "--data_dir=my_records --model_dir=runs/my_model",
        ),
    ]


if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported (by keras_vit_data): our lines only
    main(sys.argv[1:])
