r"""The compute frontier of the main job: Fashion-MNIST from scratch, test accuracy
against training compute, for the demo's ViT, a ViT with more tokens and the
paper's hybrids (§3.1; its Figure 5 has hybrids ahead of plain ViTs at small
compute, the gap closing as compute grows): the ResNet stem alone (49 tokens), and
the stem with a stride-2 ResNet stage (16 tokens), varied on each of the hybrid's axes:
Transformer blocks (4, 8), ResNet units per stage (1, 2) and width factor (0.5, 1).

  python benchmarks/frontier.py --work_dir=WORK --stage=sweep     # learning rates
  python benchmarks/frontier.py --work_dir=WORK --stage=frontier  # the budgets
  python benchmarks/frontier.py --work_dir=WORK --stage=seeds     # seeds at the demo budget
  python benchmarks/frontier.py --work_dir=WORK --stage=budget --reference_steps=1740
  python benchmarks/frontier.py --plot    # docs/images/frontier.png + the summary

Each point (arm, steps, learning rate, seed) is one trainers/pretrain.py run with the
arm's config; it writes benchmarks/results/frontier/<point>.json as it finishes
(accuracy, training images, images/s, GFLOPs per image, wall time, CPU kind,
commit), and a rerun skips every point whose JSON exists, so the hours-long run
resumes where it stopped. --arms, --steps, --lrs and --seeds override a stage's
plan.

sweep     every arm at SWEEP_STEPS with each of SWEEP_LRS, trained on 90% of the
          training images and scored on the held-out tenth (WORK/data_holdout, written
          by tools/make_tfrecords.py --holdout), never on the test split.
frontier  every arm at each of its budgets (ARMS) with its best sweep learning rate.
seeds     every arm at its largest budget (the demo's training time) with seeds 1
          and 2 (seed 0 is the frontier's point).
budget    every arm for one training time, on the machine at hand: the time in which
          the demo's model (hybrid_stage2) trains --reference_steps (e.g. the steps
          make demo trains on some machine kind). Each arm's speed is measured here
          first, with make demo's own calibration (tools/demo_budget.py: the trainer's
          update, median call), in BUDGET_ROUNDS interleaved rounds (WORK/speeds.json),
          and it trains the steps that take that time at its speed. Trained on 90% of
          the training images and scored on the held-out tenth, as the sweep.
The warm-up is the demo's fraction of the steps (300 of 4,500); everything else is
the arm's config. Measurements, not pass/fail; the machine is named in every JSON
(cli/machine.py): compare wall times within one machine only.
"""

import json
import os
import time

from absl import app, flags

from keras_vit_benchmarks import trainer_runs
from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info

RESULTS = os.path.join(commands.ROOT, "benchmarks", "results", "frontier")
FIGURE = os.path.join(commands.ROOT, "docs", "images", "frontier.png")
SUMMARY = os.path.join(commands.ROOT, "benchmarks", "results", "frontier.json")

# name: (label, config, --config overrides, step budgets). vit_p4 has the hybrid's
# Transformer on the same 7x7 grid, so the two differ in the tokeniser only. The
# budgets are equal training wall time, not equal steps: 1, 3 and 9.6 epochs of the
# demo ViT (470, 1,400 and 4,500 steps, the last its config's), and for the arms on
# 49 tokens the steps that take as long at the half speed they trained at in the
# sweep (both 0.50 of the demo ViT's images/s, AMD Zen 4; the JSONs record each
# point's own speed and FLOPs, and the figure plots what each point measured). The
# stage-2 hybrids put a stride-2 ResNet stage before the Transformer: 16 tokens, and
# steps at the speed their sweep measured (the progress bar's steady rate, Zen 4; for
# units2 and wide the median of their sweep's points against stage2's: 0.83 and 0.66).
ARMS = {
    "vit_p7": (
        "ViT, patch 7 (4x4 tokens), 6 blocks: configs/fashion_mnist.py",
        "configs/fashion_mnist.py",
        (),
        (470, 1400, 4500),
    ),
    "vit_p4": (
        "ViT, patch 4 (7x7 tokens), 4 blocks",
        "configs/fashion_mnist.py",
        ("--config.model.patch_size=4", "--config.model.num_layers=4"),
        (235, 700, 2250),
    ),
    "hybrid": (
        "hybrid: ResNet stem (7x7 tokens), 4 blocks",
        "configs/fashion_mnist_hybrid.py:stem",
        (),
        (235, 700, 2250),
    ),
    "hybrid_stage2": (
        "hybrid: stem + 2 ResNet units, stride 2 (4x4 tokens), 4 blocks",
        "configs/fashion_mnist_hybrid.py:stage2",
        (),
        (500, 1500, 4800),
    ),
    "hybrid_stage2_deep": (
        "hybrid: stem + 2 ResNet units, stride 2 (4x4 tokens), 8 blocks",
        "configs/fashion_mnist_hybrid.py:stage2_deep",
        (),
        (320, 950, 3050),
    ),
    "hybrid_stage2_units2": (
        "hybrid: stem + 2x2 ResNet units, stride 2 (4x4 tokens), 4 blocks",
        "configs/fashion_mnist_hybrid.py:stage2_units2",
        (),
        (415, 1245, 4000),
    ),
    "hybrid_stage2_wide": (
        "hybrid: stem + 2 ResNet units at twice the width, stride 2 (4x4 tokens), 4 blocks",
        "configs/fashion_mnist_hybrid.py:stage2_wide",
        (),
        (335, 1000, 3200),
    ),
    # Cheaper than stage2 per image, for the slowest kind's budget (the budget stage only).
    "hybrid_stage2_shallow": (
        "hybrid: stem + 2 ResNet units, stride 2 (4x4 tokens), 2 blocks",
        "configs/fashion_mnist_hybrid.py:stage2_shallow",
        (),
        (),
    ),
    "hybrid_stage2_narrow": (
        "hybrid: stem + 2 ResNet units, stride 2 (4x4 tokens), 4 blocks of hidden 96",
        "configs/fashion_mnist_hybrid.py:stage2_narrow",
        (),
        (),
    ),
}
SWEEP_STEPS = 500
# The arm whose --reference_steps set the budget stage's training time: the demo's model.
REFERENCE_ARM = "hybrid_stage2"
BUDGET_ROUNDS = 2  # interleaved speed measurements per arm; their mean is the arm's speed
STEP_QUANTUM = 30  # the budget stage's steps are multiples of it, as the demo's
SWEEP_LRS = (1e-3, 2e-3, 4e-3)
WARMUP_FRACTION = 300 / 4500  # configs/fashion_mnist.py's warm-up share
# Fashion-MNIST's own benchmark table: two convolutions + pooling, 91.6-92.5%.
CNN_BASELINE = (0.916, 0.925)

flags.DEFINE_string("work_dir", None, "Where the runs and the hold-out records go.")
flags.DEFINE_string("data_dir", commands.DEMO_DATA_DIR, "make demo's Fashion-MNIST records.")
flags.DEFINE_enum("stage", None, ["sweep", "frontier", "seeds", "budget"], "What to run.")
flags.DEFINE_integer(
    "reference_steps",
    None,
    f"--stage=budget: the steps {REFERENCE_ARM} trains in the budget's training time.",
)
flags.DEFINE_list("arms", None, f"Arms (default all: {', '.join(ARMS)}).")
flags.DEFINE_list("steps", None, "Step counts (default: the stage's).")
flags.DEFINE_list("lrs", None, "Learning rates (default: the stage's; the sweep's best after).")
flags.DEFINE_list("seeds", None, "Seeds (default: the stage's).")
flags.DEFINE_bool("plot", False, "Draw docs/images/frontier.png and write the summary.")
FLAGS = flags.FLAGS


def stage_of(point):
    """The stage that trained `point` (points before the budget stage name none)."""
    return point.get("stage") or ("sweep" if point["sweep"] else "frontier")


def held_out(stage):
    """Whether `stage` trains on 90% of the training images and scores the tenth."""
    return stage in ("sweep", "budget")


def point_name(arm, steps, lr, seed, stage="frontier", reference_steps=None):
    prefix = {"sweep": "sweep_", "budget": f"budget{reference_steps}_"}.get(stage, "")
    return f"{prefix}{arm}_steps{steps}_lr{lr:g}_seed{seed}"


def best_lr(arm, points, default=None):
    """The arm's learning rate with the best hold-out accuracy in the sweep (`default`,
    where given, for an arm the sweep did not run)."""
    sweep = [p for p in points if p["arm"] == arm and stage_of(p) == "sweep"]
    if not sweep:
        if default is not None:
            return default
        raise app.UsageError(f"no sweep point for arm {arm!r}: run --stage=sweep first")
    return max(sweep, key=lambda p: p["validation_accuracy"])["learning_rate"]


def run_point(arm, steps, lr, seed, data_dir, stage="frontier", budget=None):
    """Trains one point (unless its JSON exists) and writes its JSON. `budget`: the
    budget stage's {reference_steps, measured_images_per_second, reference_images_per_second}."""
    from keras_vit_benchmarks import speed_flops

    budget = budget or {}
    sweep = held_out(stage)
    name = point_name(arm, steps, lr, seed, stage, budget.get("reference_steps"))
    out = os.path.join(RESULTS, f"{name}.json")
    if os.path.exists(out):
        return
    label, config, overrides, _ = ARMS[arm]
    load_before = os.getloadavg()
    command = commands.trainer_command(
        "pretrain",
        config,
        data_dir,
        os.path.join(FLAGS.work_dir, name),
        "--strategy=default",
        f"--config.total_steps={steps}",
        f"--config.learning_rate={lr}",
        f"--config.warmup_steps={max(1, round(steps * WARMUP_FRACTION))}",
        f"--config.seed={seed}",
        f"--config.checkpoint_every={steps}",
        "--config.evals.test.every=0",
        *overrides,
    )
    metrics = trainer_runs.run_once(FLAGS.work_dir, name, command)
    with open(os.path.join(FLAGS.work_dir, name, "model_config.json")) as f:
        spec = json.load(f)
    spec = spec.get("config", spec)
    image_size = spec.get("image_size", 28)
    gflops = speed_flops.model_forward_flops(spec, image_size, spec.get("num_classes", 10)) / 1e9
    images = metrics["step"] * metrics["global_batch_size"]
    result = {
        "point": name,
        "arm": arm,
        "label": label,
        "config": config,
        "overrides": list(overrides),
        "sweep": stage == "sweep",
        "stage": stage,
        **budget,
        "steps": metrics["step"],
        "batch_size": metrics["global_batch_size"],
        "train_images": images,
        "epochs": images / (54_000 if sweep else 60_000),
        "learning_rate": lr,
        "seed": seed,
        "test_accuracy": metrics.get("test_accuracy"),
        "validation_accuracy": metrics.get("validation_accuracy"),
        "train_images_per_second": metrics["train_images_per_second"],
        # The training loop's time (compilation included); wall_seconds adds the
        # start-up, the final evaluations and the export.
        "train_seconds": images / metrics["train_images_per_second"],
        "wall_seconds": metrics["wall_seconds"],
        "resumed_from_step": metrics.get("resumed_from_step", 0),
        "gflops_per_image": gflops,
        "train_pflops": speed_flops.step_flops(gflops * 1e9, images, "train") / 1e15,
        "model": spec,
    }
    result = trainer_runs.write_point(out, result, load_before)
    score = result["validation_accuracy"] if sweep else result["test_accuracy"]
    print(
        f"[{time.strftime('%H:%M:%S')}] {name}: {'validation' if sweep else 'test'} "
        f"{100 * score:.2f}%, {result['train_images_per_second']:.0f} images/s, "
        f"{result['wall_seconds']:.0f} s",
        flush=True,
    )


def measure_speeds(work_dir, arms):
    """{arm: images/s of its trainer update on this machine}: make demo's calibration
    (tools/demo_budget.py, one program per measurement), BUDGET_ROUNDS rounds over the
    arms (a load that comes and goes falls on every arm alike), each arm's mean. Kept in
    WORK/speeds.json: a rerun plans the same steps."""
    from keras_vit_tools import demo

    path = os.path.join(work_dir, "speeds.json")
    speeds = {}
    if os.path.exists(path):
        with open(path) as f:
            speeds = json.load(f)
    todo = [arm for arm in arms if arm not in speeds]
    calls = {arm: [] for arm in todo}
    for round_ in range(BUDGET_ROUNDS if todo else 0):
        for arm in todo:
            _, config, overrides, _ = ARMS[arm]
            rate = demo.calibrate(list(overrides), os.path.join(commands.ROOT, config))
            rate = rate.images_per_second
            calls[arm].append(rate)
            print(
                f"[{time.strftime('%H:%M:%S')}] speed round {round_ + 1}: {arm} {rate:.0f} images/s",
                flush=True,
            )
    for arm, rates in calls.items():
        speeds[arm] = sum(rates) / len(rates)
    with open(path, "w") as f:
        json.dump(speeds, f, indent=1)
    return speeds


def budget_plan(arms, points, reference_steps, speeds):
    """[(arm, steps, lr, seed, stage, budget)] of the budget stage: each arm for the
    training time in which REFERENCE_ARM trains `reference_steps` at the speeds
    measured here, in whole STEP_QUANTUMs."""
    seeds = [int(s) for s in FLAGS.seeds] if FLAGS.seeds else [0]
    reference = speeds[REFERENCE_ARM]
    todo = []
    for arm in arms:
        steps = round(reference_steps * speeds[arm] / reference / STEP_QUANTUM) * STEP_QUANTUM
        budget = dict(
            reference_steps=reference_steps,
            measured_images_per_second=speeds[arm],
            reference_images_per_second=reference,
        )
        for lr in [float(x) for x in FLAGS.lrs] if FLAGS.lrs else [best_lr(arm, points, 2e-3)]:
            todo += [(arm, steps, lr, seed, "budget", budget) for seed in seeds]
    return todo


def plan(stage, points):
    """[(arm, steps, lr, seed, stage, None)] for a stage, with the flags' overrides."""
    # The budget-only arms (no budgets of their own) only where named.
    arms = FLAGS.arms or [arm for arm in ARMS if ARMS[arm][3]]
    unknown = sorted(set(arms) - set(ARMS))
    if unknown:
        raise app.UsageError(f"--arms: unknown {unknown}; known: {sorted(ARMS)}")
    steps = [int(s) for s in FLAGS.steps] if FLAGS.steps else None
    seeds = [int(s) for s in FLAGS.seeds] if FLAGS.seeds else None
    lrs = [float(x) for x in FLAGS.lrs] if FLAGS.lrs else None
    if stage == "sweep":
        return [
            (arm, s, lr, seed, stage, None)
            for arm in arms
            for s in steps or [SWEEP_STEPS]
            for lr in lrs or SWEEP_LRS
            for seed in seeds or [0]
        ]
    return [
        (arm, s, lr, seed, stage, None)
        for arm in arms
        for lr in lrs or [best_lr(arm, points)]
        for s in steps or (ARMS[arm][3] if stage == "frontier" else ARMS[arm][3][-1:])
        for seed in seeds or ([0] if stage == "frontier" else [1, 2])
    ]


def summarize(points):
    """Per arm at its best learning rate: [(steps, mean accuracy, std, n, PFLOPs,
    wall minutes, images/s)], and the learning rates."""
    from keras_vit_benchmarks.trainer_runs import mean_std

    summary = {}
    for arm in ARMS:
        if not any(p["arm"] == arm and stage_of(p) == "sweep" for p in points):
            continue
        lr = best_lr(arm, points)
        rows = []
        runs = [
            p
            for p in points
            if p["arm"] == arm and stage_of(p) == "frontier" and p["learning_rate"] == lr
        ]
        for steps in sorted({p["steps"] for p in runs}):
            at = [p for p in runs if p["steps"] == steps]
            timed = min(at, key=lambda p: p["seed"])
            mean, std = mean_std([p["test_accuracy"] for p in at])
            rows.append(
                dict(
                    steps=steps,
                    epochs=at[0]["epochs"],
                    test_accuracy=mean,
                    std=std,
                    seeds=sorted(p["seed"] for p in at),
                    train_pflops=at[0]["train_pflops"],
                    train_tflops=1000 * at[0]["train_pflops"],
                    gflops_per_image=at[0]["gflops_per_image"],
                    # Speed from the frontier's own point (seed 0, run alone); the
                    # other seeds' runs may have shared the machine.
                    train_minutes=timed["train_seconds"] / 60,
                    train_images_per_second=timed["train_images_per_second"],
                )
            )
        sweep = {
            f"{p['learning_rate']:g}": p["validation_accuracy"]
            for p in points
            if p["arm"] == arm and stage_of(p) == "sweep"
        }
        summary[arm] = dict(label=ARMS[arm][0], learning_rate=lr, sweep=sweep, budgets=rows)
    return summary


def plot(summary, machine):
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 5.8), sharey=True)
    for key, ax, xlabel, log in (
        (
            "train_tflops",
            axes[0],
            "training compute (TFLOPs, analytic: 3 forwards per image)",
            True,
        ),
        ("train_minutes", axes[1], f"training time (minutes, {machine})", False),
    ):
        for entry in summary.values():
            rows = entry["budgets"]
            if not rows:
                continue
            ax.errorbar(
                [r[key] for r in rows],
                [100 * r["test_accuracy"] for r in rows],
                yerr=[100 * r["std"] for r in rows],
                marker="o",
                capsize=3,
                label=f"{entry['label']} (lr {entry['learning_rate']:g})",
            )
        ax.axhspan(100 * CNN_BASELINE[0], 100 * CNN_BASELINE[1], color="grey", alpha=0.25)
        ax.axhline(100 * CNN_BASELINE[0], color="grey", linestyle="--", linewidth=1)
        ax.text(
            0.02,
            100 * CNN_BASELINE[1] + 0.1,
            "2-conv CNN, 91.6-92.5% (Fashion-MNIST's table)",
            transform=ax.get_yaxis_transform(),
            fontsize=8,
            color="dimgrey",
        )
        if log:
            ax.set_xscale("log")
            ax.xaxis.set_major_locator(matplotlib.ticker.FixedLocator([5, 10, 20, 50]))
            ax.xaxis.set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("Fashion-MNIST test accuracy (%)")
    # Below both panels: the arms' labels are long, and the panels' lower left is data.
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=2, frameon=False)
    fig.suptitle("From scratch on a 2-core CPU: accuracy against training compute", fontsize=11)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    os.makedirs(os.path.dirname(FIGURE), exist_ok=True)
    fig.savefig(FIGURE, dpi=110)
    plt.close(fig)


def report(points):
    summary = summarize(points)
    machines = sorted({p["machine"].get("cpu_kind") or p["machine"]["cpu_model"] for p in points})
    machine = ", ".join(machines)
    print(describe(points[-1]["machine"]))
    for arm, entry in summary.items():
        print(
            f"{arm}: {entry['label']}; learning rate {entry['learning_rate']:g} (sweep {entry['sweep']})"
        )
        for r in entry["budgets"]:
            print(
                f"  {r['steps']:5d} steps ({r['epochs']:.1f} epochs): {100 * r['test_accuracy']:.2f}"
                f" +- {100 * r['std']:.2f}% (seeds {r['seeds']}), {r['train_pflops']:.3f} PFLOPs,"
                f" {r['train_minutes']:.1f} min, {r['train_images_per_second']:.0f} images/s"
            )
    with open(SUMMARY, "w") as f:
        json.dump(dict(machines=machines, cnn_baseline=CNN_BASELINE, arms=summary), f, indent=1)
    plot(summary, machine)
    print(
        f"wrote {os.path.relpath(SUMMARY, commands.ROOT)} and {os.path.relpath(FIGURE, commands.ROOT)}"
    )


def main(argv):
    del argv
    points = trainer_runs.load_points(RESULTS)
    if FLAGS.plot:
        if not points:
            raise app.UsageError(f"no points in {RESULTS}")
        report(points)
        return
    if not FLAGS.work_dir or not FLAGS.stage:
        raise app.UsageError("--work_dir and --stage are required (or --plot)")
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    data_dir = os.path.abspath(FLAGS.data_dir)
    if FLAGS.stage == "budget":
        if not FLAGS.reference_steps:
            raise app.UsageError("--stage=budget needs --reference_steps")
        arms = FLAGS.arms or list(ARMS)
        unknown = sorted(set(arms) - set(ARMS))
        if unknown:
            raise app.UsageError(f"--arms: unknown {unknown}; known: {sorted(ARMS)}")
        speeds = measure_speeds(FLAGS.work_dir, sorted({REFERENCE_ARM, *arms}))
        todo = budget_plan(arms, points, FLAGS.reference_steps, speeds)
    else:
        todo = plan(FLAGS.stage, points)
    if held_out(FLAGS.stage):
        data_dir = trainer_runs.holdout_records(FLAGS.work_dir)
    elif not os.path.exists(os.path.join(data_dir, "manifest.json")):
        raise app.UsageError(f"--data_dir={FLAGS.data_dir}: no records (run make data)")
    print(f"{describe(machine_info())}\n{len(todo)} points", flush=True)
    for arm, steps, lr, seed, stage, budget in todo:
        run_point(arm, steps, lr, seed, data_dir, stage, budget)


if __name__ == "__main__":
    app.run(main)
