r"""Masked patch pre-training vs. training from scratch, Fashion-MNIST, 1,000 labels.

  python benchmarks/masked_patch_fashion_mnist.py --data_dir=DATA --work_dir=WORK \
      [--output_json=WORK/results.json]

Runs, one after the other (each skipped when WORK/<name>/metrics.json exists):
  ssl            trainers/pretrain.py --config=configs/fashion_mnist_masked_patch.py
                 (the 60,000 training images, labels unused)
  ft_ssl         trainers/finetune.py --config=configs/fashion_mnist.py --init=ssl
                 --config.train_examples=1000
  init_random    a freshly initialised model of the same config, exported as a RUN
  ft_scratch     the same finetune.py command with --init=init_random: the same
                 model, data, recipe and budget, without pre-training
  fewshot        tools/fewshot.py (1/5/10/25 shots, 3 seeds) on the frozen
                 representations of ssl and init_random
  scratch_adamw  (--adamw_baseline) configs/fashion_mnist.py's from-scratch recipe
                 (pretrain.py: AdamW, lr 2e-3, weight decay 0.05, no EMA) for the same
                 500 steps of 128 images on the same 1,000 examples (warmup 50)
  ft_ssl_adamw,  (--adamw_baseline) that recipe as finetune.py overrides
  ft_scratch_adamw  (ADAMW_FINETUNE), from ssl and from init_random
Prints a table and writes JSON, both naming the machine (benchmarks/machine.py: CPU
kinds differ up to 4x). Measurements, not pass/fail.
"""

import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from absl import (
    app,  # noqa: E402
    flags,  # noqa: E402
)

from benchmarks.machine import describe, machine_info  # noqa: E402

flags.DEFINE_string("data_dir", None, "tools/make_tfrecords.py --source=fashion_mnist output.")
flags.DEFINE_string("work_dir", None, "Where the runs go.")
flags.DEFINE_integer("train_examples", 1000, "Labelled training examples for fine-tuning.")
flags.DEFINE_string("output_json", None, "Results file (default WORK/results.json).")
flags.DEFINE_list("extra", [], "Extra --config.KEY=VALUE flags for every run.")
flags.DEFINE_bool("adamw_baseline", True, "Also run the AdamW from-scratch baseline.")
FLAGS = flags.FLAGS

PY = sys.executable
# configs/fashion_mnist.py's from-scratch recipe as finetune.py overrides.
ADAMW_FINETUNE = (
    "--config.finetune.optimizer=adamw",
    "--config.finetune.learning_rate=0.002",
    "--config.finetune.weight_decay=0.05",
    "--config.finetune.ema_momentum=0",
    "--config.finetune.warmup_steps=50",
)


def _run(name, cmd):
    run_dir = os.path.join(FLAGS.work_dir, name)
    metrics = os.path.join(run_dir, "metrics.json")
    if not os.path.exists(metrics):
        print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(cmd)}", flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)
    with open(metrics) as f:
        return json.load(f)


def _trainer(trainer, config, name, *extra):
    return [
        PY,
        os.path.join("trainers", f"{trainer}.py"),
        f"--config={config}",
        f"--data_dir={FLAGS.data_dir}",
        f"--model_dir={os.path.join(FLAGS.work_dir, name)}",
        *extra,
        *FLAGS.extra,
    ]


def _export_random_init(name):
    """RUN dir of the configs/fashion_mnist.py model as initialised (seed 0)."""
    run_dir = os.path.join(FLAGS.work_dir, name)
    if os.path.exists(os.path.join(run_dir, "model.weights.h5")):
        return run_dir
    import keras

    from configs import fashion_mnist
    from trainers import train_lib

    config = fashion_mnist.get_config()
    keras.utils.set_random_seed(int(config.seed))
    model = train_lib.model_factory(config)[0](num_classes=10)
    os.makedirs(run_dir, exist_ok=True)
    train_lib.export(model, run_dir)
    return run_dir


def _raw_test_accuracy(run_dir):
    """Test accuracy of a run's final *raw* weights (RUN/checkpoints; the export holds
    the EMA weights when ema_momentum > 0). EMA never feeds back into training, so
    this is what the same run with ema_momentum=0 reports."""
    import numpy as np

    import keras_vit
    from trainers import input_pipeline

    with open(os.path.join(run_dir, "model_config.json")) as f:
        model = keras_vit.VisionTransformer.from_config(json.load(f))
    model.load_weights(os.path.join(run_dir, "checkpoints", "latest.weights.h5"))
    correct = total = 0.0
    for x, y, w in input_pipeline.eval_dataset(
        FLAGS.data_dir, batch_size=500, image_size=model.image_size, num_classes=10
    ):
        hit = np.argmax(model.predict_on_batch(x), axis=-1) == y.numpy()
        correct += float(np.sum(hit * w.numpy()))
        total += float(np.sum(w.numpy()))
    return correct / total


def _fewshot(run_dir):
    out = os.path.join(run_dir, "fewshot.json")
    if not os.path.exists(out):
        subprocess.run(
            [
                PY,
                os.path.join("tools", "fewshot.py"),
                f"--run_dir={run_dir}",
                f"--data_dir={FLAGS.data_dir}",
                f"--output_json={out}",
            ],
            cwd=ROOT,
            check=True,
        )
    with open(out) as f:
        return json.load(f)


def main(argv):
    del argv
    if not FLAGS.data_dir or not FLAGS.work_dir:
        raise app.UsageError("--data_dir and --work_dir are required")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    n = f"--config.train_examples={FLAGS.train_examples}"
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "train_examples": FLAGS.train_examples,
        "machine": machine_info(),
    }
    results["ssl"] = _run(
        "ssl", _trainer("pretrain", "configs/fashion_mnist_masked_patch.py", "ssl")
    )
    results["ft_ssl"] = _run(
        "ft_ssl",
        _trainer(
            "finetune",
            "configs/fashion_mnist.py",
            "ft_ssl",
            f"--init={os.path.join(FLAGS.work_dir, 'ssl')}",
            n,
        ),
    )
    init = _export_random_init("init_random")
    results["ft_scratch"] = _run(
        "ft_scratch",
        _trainer("finetune", "configs/fashion_mnist.py", "ft_scratch", f"--init={init}", n),
    )
    for key in ("ft_ssl", "ft_scratch"):
        results[key]["raw_weights_test_accuracy"] = _raw_test_accuracy(
            os.path.join(FLAGS.work_dir, key)
        )
    results["fewshot_ssl"] = _fewshot(os.path.join(FLAGS.work_dir, "ssl"))
    results["fewshot_random_init"] = _fewshot(init)
    if FLAGS.adamw_baseline:
        results["scratch_adamw"] = _run(
            "scratch_adamw",
            _trainer(
                "pretrain",
                "configs/fashion_mnist.py",
                "scratch_adamw",
                n,
                "--config.total_steps=500",
                "--config.warmup_steps=50",
                "--config.checkpoint_every=100",
            ),
        )
        for name, init_dir in (
            ("ft_ssl_adamw", os.path.join(FLAGS.work_dir, "ssl")),
            ("ft_scratch_adamw", init),
        ):
            results[name] = _run(
                name,
                _trainer(
                    "finetune",
                    "configs/fashion_mnist.py",
                    name,
                    f"--init={init_dir}",
                    n,
                    *ADAMW_FINETUNE,
                ),
            )

    ssl_r, scratch_r = results["ft_ssl"], results["ft_scratch"]
    results["gain_ema"] = ssl_r["test_accuracy"] - scratch_r["test_accuracy"]
    results["gain_raw"] = (
        ssl_r["raw_weights_test_accuracy"] - scratch_r["raw_weights_test_accuracy"]
    )
    print(f"\n{describe(results['machine'])}")
    print(
        f"Fashion-MNIST test accuracy, {FLAGS.train_examples} labelled training images "
        "(EMA weights as exported / raw final weights):"
    )
    for r, what in (
        (ssl_r, "masked-patch pre-trained, fine-tuned "),
        (scratch_r, "from scratch, same fine-tuning recipe"),
    ):
        print(f"  {what} {r['test_accuracy']:.4f} / {r['raw_weights_test_accuracy']:.4f}")
    print(
        f"  gain                                  {100 * results['gain_ema']:+.2f} / "
        f"{100 * results['gain_raw']:+.2f} points"
    )
    if "scratch_adamw" in results:
        results["gain_adamw"] = (
            results["ft_ssl_adamw"]["test_accuracy"] - results["ft_scratch_adamw"]["test_accuracy"]
        )
        print("AdamW recipe (lr 2e-3, weight decay 0.05, no EMA), same 500 steps of 128:")
        for key, what in (
            ("ft_ssl_adamw", "masked-patch pre-trained, fine-tuned "),
            ("ft_scratch_adamw", "from scratch (finetune.py)          "),
            ("scratch_adamw", "from scratch (pretrain.py)          "),
        ):
            print(f"  {what} {results[key]['test_accuracy']:.4f}")
        print(f"  gain                                  {100 * results['gain_adamw']:+.2f} points")
    print(
        f"  masked-patch accuracy of the pre-training task (test) "
        f"{results['ssl']['test_accuracy']:.4f}"
    )
    for key in ("fewshot_ssl", "fewshot_random_init"):
        shots = results[key]["results"]
        print(
            f"  few-shot ({key[8:]}): "
            + ", ".join(
                f"{k}-shot {v['mean']:.4f}" if isinstance(v, dict) else f"{k}-shot {v}"
                for k, v in shots.items()
            )
        )
    out = FLAGS.output_json or os.path.join(FLAGS.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
