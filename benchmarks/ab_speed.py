r"""Inference speed of two versions of keras_vit, interleaved in one run (A/B).

  python benchmarks/ab_speed.py --old=ef7b7f8 [--new=.] --variant=ViT_B16 --batch=8 \
      --rounds=5 [--json=PATH]

`--old` is a git revision, checked out into a temporary worktree; `--new` a source
tree (default: this checkout). Each round runs one fresh process per version, in
alternating order (old, new, new, old, ...), so that drift in the machine's load
hits both alike: each process builds the variant at its default (fixed) size, warms
up `predict_on_batch` (the model's default compilation) and times `--steps` batches.
Reports each version's median images/s and the median of the per-round ratios
new/old; names the machine (cli/machine.py). A measurement, not pass/fail.
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from absl import app, flags

from keras_vit_cli.machine import describe, machine_info

flags.DEFINE_string("old", None, "Git revision of the old version.")
flags.DEFINE_string("new", ROOT, "Source tree of the new version.")
flags.DEFINE_string("variant", "ViT_B16", "keras_vit builder name.")
flags.DEFINE_integer("batch", 8, "Images per batch.")
flags.DEFINE_integer("steps", 3, "Timed batches per process.")
flags.DEFINE_integer("rounds", 5, "Processes per version.")
flags.DEFINE_string("dtype", "float32", "Dtype policy.")
flags.DEFINE_string("json", None, "Write the results here too.")
FLAGS = flags.FLAGS

CHILD = """
import sys, time
sys.path.insert(0, {tree!r})
import numpy as np, keras, keras_vit
assert keras_vit.__file__.startswith({tree!r}), keras_vit.__file__
model = keras_vit.build_model({variant!r}, dtype={dtype!r})
size = model.image_size if isinstance(model.image_size, int) else model.image_size[0]
x = np.random.default_rng(0).uniform(-1, 1, ({batch}, size, size, 3)).astype("float32")
for _ in range(2):
    keras.ops.convert_to_numpy(model.predict_on_batch(x))
start = time.perf_counter()
for _ in range({steps}):
    keras.ops.convert_to_numpy(model.predict_on_batch(x))
print("RATE", {batch} * {steps} / (time.perf_counter() - start))
"""


def _rate(tree):
    code = CHILD.format(
        tree=os.path.abspath(tree),
        variant=FLAGS.variant,
        dtype=FLAGS.dtype,
        batch=FLAGS.batch,
        steps=FLAGS.steps,
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tempfile.gettempdir(),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(out.stdout.split("RATE")[-1])


def main(argv):
    del argv
    if not FLAGS.old:
        raise app.UsageError("--old=REV is required")
    with tempfile.TemporaryDirectory() as tmp:
        old_tree = os.path.join(tmp, "old")
        subprocess.run(
            ["git", "worktree", "add", "--detach", old_tree, FLAGS.old],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            rates = {"old": [], "new": []}
            for i in range(FLAGS.rounds):
                order = ("old", "new") if i % 2 == 0 else ("new", "old")
                for which in order:
                    rates[which].append(_rate(old_tree if which == "old" else FLAGS.new))
                print(
                    f"round {i + 1}: old {rates['old'][-1]:.2f}, new {rates['new'][-1]:.2f} images/s"
                )
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", old_tree], cwd=ROOT, check=False
            )
    ratios = [n / o for n, o in zip(rates["new"], rates["old"])]
    result = dict(
        old=FLAGS.old,
        variant=FLAGS.variant,
        batch=FLAGS.batch,
        dtype=FLAGS.dtype,
        rates=rates,
        median_old=statistics.median(rates["old"]),
        median_new=statistics.median(rates["new"]),
        median_ratio=statistics.median(ratios),
        machine=machine_info(),
    )
    print(describe(result["machine"]))
    print(
        f"{FLAGS.variant} batch {FLAGS.batch} {FLAGS.dtype}: old {result['median_old']:.2f}, "
        f"new {result['median_new']:.2f} images/s; median ratio new/old {result['median_ratio']:.3f}"
    )
    if FLAGS.json:
        with open(FLAGS.json, "w") as f:
            json.dump(result, f, indent=1)


if __name__ == "__main__":
    app.run(main)
