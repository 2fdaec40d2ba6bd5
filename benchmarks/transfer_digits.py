r"""Transfer, shown rather than claimed: scikit-learn's 1,797 scanned digits fine-tuned
from the Fashion-MNIST demo model against the same fine-tuning from scratch, same
architecture, recipe and budget, several seeds.

  make demo   # or any trainers/pretrain.py RUN of configs/fashion_mnist.py
  python benchmarks/transfer_digits.py --pretrained=runs/fashion_mnist_hybrid --work_dir=WORK \
      [--seeds=0,1,2] [--output_json=benchmarks/results/transfer_digits.json]

Steps (each skipped when its output exists, so a rerun resumes):
  images        WORK/digits/{train,test}/<digit>/<index>.png: every fifth digit (in
                scikit-learn's order) is a test image, 360 of 1,797
  data          tools/make_tfrecords.py --source=folder:WORK/digits --holdout=0.1:
                train, a stratified `validation` tenth of it, and test
  pretrained_s  trainers/finetune.py --config=configs/fashion_mnist.py --init=PRETRAINED
                --config.seed=s (the config's `finetune` section: SGD, 500 steps)
  scratch_s     the same command with --init=random_s, the pre-trained RUN's
                architecture as initialised with seed s
Prints test accuracy mean +- std over seeds and writes JSON naming the machine
(cli/machine.py). Needs scikit-learn (the `test` extra). Measurements, not
pass/fail.
"""

import json
import os
import time

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info

flags.DEFINE_string("pretrained", "runs/fashion_mnist_hybrid", "A pretrain RUN (make demo's).")
flags.DEFINE_string("work_dir", None, "Where the images, records and runs go.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Fine-tuning seeds (and scratch init seeds).")
flags.DEFINE_float("holdout", 0.1, "Validation fraction of the training digits.")
flags.DEFINE_list("extra", [], "Extra --config.KEY=VALUE flags for every fine-tuning run.")
flags.DEFINE_string("output_json", None, "Results file (default WORK/results.json).")
FLAGS = flags.FLAGS

CONFIG = "configs/fashion_mnist.py"
TEST_EVERY = 5  # every fifth digit is a test image


def write_digits(root):
    """scikit-learn's digits as 8x8 grey PNGs (0-16 scaled to 0-255) in class folders:
    ROOT/{train,test}/<digit>/<index>.png. Returns the number written."""
    if os.path.isdir(root):
        return sum(len(files) for _, _, files in os.walk(root))
    import numpy as np
    import tensorflow as tf
    from sklearn.datasets import load_digits

    digits = load_digits()
    pixels = np.round(digits.images * (255 / 16)).astype(np.uint8)
    for index, (image, label) in enumerate(zip(pixels, digits.target)):
        split = "test" if index % TEST_EVERY == 0 else "train"
        folder = os.path.join(root, split, str(label))
        os.makedirs(folder, exist_ok=True)
        png = tf.io.encode_png(image[:, :, None]).numpy()
        with open(os.path.join(folder, f"{index:04d}.png"), "wb") as f:
            f.write(png)
    return len(pixels)


def make_records(images, data_dir):
    from keras_vit_data import writer

    writer.ensure_records(f"folder:{images}", data_dir, holdout=FLAGS.holdout)


def main(argv):
    del argv
    if not FLAGS.work_dir:
        raise app.UsageError("--work_dir is required")
    pretrained = os.path.abspath(FLAGS.pretrained)
    if not os.path.exists(os.path.join(pretrained, "model.weights.h5")):
        raise app.UsageError(f"--pretrained={FLAGS.pretrained}: no exported model there")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    images = os.path.join(FLAGS.work_dir, "digits")
    data_dir = os.path.join(FLAGS.work_dir, "data")
    count = write_digits(images)
    make_records(images, data_dir)
    seeds = [int(s) for s in FLAGS.seeds]
    results = {
        "date": time.strftime("%Y-%m-%d"),
        "images": count,
        "pretrained": FLAGS.pretrained,
        "config": CONFIG,
        "seeds": seeds,
        "extra": FLAGS.extra,
        "machine": machine_info(),
        "runs": {},
    }
    from keras_vit_configs import fashion_mnist

    config = fashion_mnist.get_config()
    table = {"pretrained": [], "scratch": []}
    for seed in seeds:
        random_init = trainer_runs.export_random_init(
            config, os.path.join(FLAGS.work_dir, f"random_{seed}"), seed, 10, like=pretrained
        )
        for arm, init in (("pretrained", pretrained), ("scratch", random_init)):
            name = f"{arm}_{seed}"
            command = commands.trainer_command(
                "finetune",
                CONFIG,
                data_dir,
                os.path.join(FLAGS.work_dir, name),
                f"--init={init}",
                f"--config.seed={seed}",
                *FLAGS.extra,
            )
            metrics = trainer_runs.run_once(FLAGS.work_dir, name, command)
            results["runs"][name] = metrics
            table[arm].append(metrics["test_accuracy"])
    results["summary"] = {}
    print(f"\n{describe(results['machine'])}")
    print(f"digits test accuracy ({count} images, seeds {seeds}; mean +- std over seeds):")
    for arm, label in (
        ("pretrained", "fine-tuned from the Fashion-MNIST model"),
        ("scratch", "from scratch, same recipe and budget"),
    ):
        mean, std = trainer_runs.mean_std(table[arm])
        results["summary"][arm] = {"mean": mean, "std": std, "values": table[arm]}
        print(f"  {label:42s} {100 * mean:.2f} +- {100 * std:.2f}%")
    gains = [a - b for a, b in zip(table["pretrained"], table["scratch"])]
    mean, std = trainer_runs.mean_std(gains)
    results["summary"]["gain"] = {"mean": mean, "std": std}
    print(f"  {'gain (paired by seed)':42s} {100 * mean:+.2f} +- {100 * std:.2f} points")
    out = FLAGS.output_json or os.path.join(FLAGS.work_dir, "results.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    app.run(main)
