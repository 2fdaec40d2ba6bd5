r"""Masked patch pre-training vs. training from scratch, Fashion-MNIST, 1,000 labels,
one architecture for both (the masked-patch config's model), several seeds.

  python benchmarks/masked_patch_fashion_mnist.py --data_dir=DATA --work_dir=WORK \
      [--seeds=0,1,2] [--adamw_baseline] [--output_json=WORK/results.json]

Runs, one after the other (each skipped when WORK/<name>/metrics.json exists):
  ssl              trainers/pretrain.py --config=configs/fashion_mnist_masked_patch.py
                   (the 60,000 training images, labels unused), once
  init_random_<s>  that config's model as initialised with seed s, exported as a RUN
  ft_ssl_<s>       trainers/finetune.py --config=configs/fashion_mnist.py --init=ssl
                   --config.train_examples=1000 --config.seed=s
  ft_scratch_<s>   the same command with --init=init_random_<s>: the same model,
                   data, recipe and budget, without pre-training
  (--adamw_baseline) ft_ssl_adamw_<s>, ft_scratch_adamw_<s>: the same with
                   configs/fashion_mnist.py's from-scratch recipe (AdamW) as
                   finetune.py overrides (ADAMW_FINETUNE)
finetune.py --init=RUN builds the RUN's own model, so every fine-tuning run here
trains the same architecture. Prints mean +- std over seeds and writes JSON, both
naming the machine (cli/machine.py). Measurements, not pass/fail.
"""

import json
import os
import time

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info

flags.DEFINE_string("data_dir", None, "tools/make_tfrecords.py --source=fashion_mnist output.")
flags.DEFINE_string("work_dir", None, "Where the runs go.")
flags.DEFINE_integer("train_examples", 1000, "Labelled training examples for fine-tuning.")
flags.DEFINE_string("output_json", None, "Results file (default WORK/results.json).")
flags.DEFINE_list("extra", [], "Extra --config.KEY=VALUE flags for every run.")
flags.DEFINE_bool("adamw_baseline", False, "Also compare with the AdamW recipe.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Fine-tuning seeds (and scratch init seeds).")
FLAGS = flags.FLAGS

# configs/fashion_mnist.py's from-scratch recipe as finetune.py overrides.
ADAMW_FINETUNE = (
    "--config.finetune.optimizer=adamw",
    "--config.finetune.learning_rate=0.002",
    "--config.finetune.weight_decay=0.05",
    "--config.finetune.ema_momentum=0",
    "--config.finetune.warmup_steps=50",
)


def _run(name, cmd):
    return trainer_runs.run_once(FLAGS.work_dir, name, cmd)


def _trainer(trainer, config, name, *extra):
    model_dir = os.path.join(FLAGS.work_dir, name)
    return commands.trainer_command(
        trainer, config, FLAGS.data_dir, model_dir, *extra, *FLAGS.extra
    )


def _export_random_init(name, seed):
    """RUN dir of configs/fashion_mnist_masked_patch.py's model (the pre-trained one's
    architecture) as initialised with `seed`."""
    from keras_vit_configs import fashion_mnist_masked_patch

    config = fashion_mnist_masked_patch.get_config()
    run_dir = os.path.join(FLAGS.work_dir, name)
    return trainer_runs.export_random_init(config, run_dir, seed, num_classes=10)


_mean_std = trainer_runs.mean_std


def _finetune(name, init, seed, *extra):
    n = f"--config.train_examples={FLAGS.train_examples}"
    cmd = _trainer(
        "finetune",
        "configs/fashion_mnist.py",
        name,
        f"--init={init}",
        n,
        f"--config.seed={seed}",
        *extra,
    )
    return _run(name, cmd)


def main(argv):
    del argv
    if not FLAGS.data_dir or not FLAGS.work_dir:
        raise app.UsageError("--data_dir and --work_dir are required")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    seeds = [int(s) for s in FLAGS.seeds]
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "train_examples": FLAGS.train_examples,
        "seeds": seeds,
        "machine": machine_info(),
    }
    ssl = os.path.join(FLAGS.work_dir, "ssl")
    results["ssl"] = _run(
        "ssl", _trainer("pretrain", "configs/fashion_mnist_masked_patch.py", "ssl")
    )
    recipes = {"finetune": ()}
    if FLAGS.adamw_baseline:
        recipes["adamw"] = ADAMW_FINETUNE
    table = {}
    for recipe, extra in recipes.items():
        suffix = "" if recipe == "finetune" else "_adamw"
        for seed in seeds:
            init = _export_random_init(f"init_random_{seed}", seed)
            for kind, start in (("ssl", ssl), ("scratch", init)):
                name = f"ft_{kind}{suffix}_{seed}"
                results[name] = _finetune(name, start, seed, *extra)
                table.setdefault((recipe, kind), []).append(results[name]["test_accuracy"])
    print(f"\n{describe(results['machine'])}")
    print(
        f"Fashion-MNIST test accuracy, {FLAGS.train_examples} labelled training images, "
        f"seeds {seeds} (mean +- std over seeds):"
    )
    results["summary"] = {}
    for recipe in recipes:
        ssl_m, ssl_s = _mean_std(table[(recipe, "ssl")])
        scr_m, scr_s = _mean_std(table[(recipe, "scratch")])
        gains = [a - b for a, b in zip(table[(recipe, "ssl")], table[(recipe, "scratch")])]
        gain_m, gain_s = _mean_std(gains)
        results["summary"][recipe] = dict(
            ssl_mean=ssl_m,
            ssl_std=ssl_s,
            scratch_mean=scr_m,
            scratch_std=scr_s,
            gain_mean=gain_m,
            gain_std=gain_s,
        )
        print(f"  recipe {recipe}:")
        print(f"    masked-patch pre-trained, fine-tuned  {100 * ssl_m:.2f} +- {100 * ssl_s:.2f}%")
        print(f"    from scratch, same recipe and budget  {100 * scr_m:.2f} +- {100 * scr_s:.2f}%")
        print(
            f"    gain (paired by seed)                 {100 * gain_m:+.2f} +- {100 * gain_s:.2f} points"
        )
    print(
        f"  masked-patch accuracy of the pre-training task (test) "
        f"{results['ssl']['test_accuracy']:.4f}"
    )
    out = FLAGS.output_json or os.path.join(FLAGS.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
