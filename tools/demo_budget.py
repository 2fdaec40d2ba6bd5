"""How long `make demo` trains: the steps that fit its 15 minutes, set-up included, on
the machine at hand.

The CPU kinds the demo runs on train its model at 416 to 1,111 images/s (2 cores,
the same recipe), so a fixed step count either leaves minutes unused on the fast
kinds or overruns the budget on the slow ones (4,800 steps: 14 min on AMD Zen 4,
about 29 on the AVX2-only AMD EPYC Zen). The demo trains for

    steps = (BUDGET_S - OVERHEAD_S) * images/s of this machine's kind / batch size

with the training speed of DEMO_CONFIG measured on each kind (`IMAGES_PER_SECOND`,
from the demo's own runs: benchmarks/demo_accuracy.py records every run's speed and
machine) and the time outside the training loop measured on the slowest kind
(`OVERHEAD_S`). A kind not in the table gets the figure of the slowest measured kind
with its instruction sets (AVX-512 or not): a budget it may undershoot, never
overrun by more than the kinds differ within a class.

Stdlib only (cli/machine.py reads /proc/cpuinfo).
"""

BUDGET_S = 900  # the README's promise: `make demo` in 15 minutes, set-up included

# `make demo`'s time outside the training loop on the slowest kind (AMD EPYC Zen, family 23
# model 1, AVX2 only, 2026-12-05), seconds: `make setup` in a bare clone (110), the Debian
# package and the TFRecords (15), the trainer's start until its first step (imports,
# the decoded cache, XLA's compilation: 61), the final evaluations with the learning
# curve and the weights (89), the SavedModel (26) and TFLite (27) exports, and a
# margin for a loaded machine (32).
OVERHEAD_S = 360

# fashion_mnist_hybrid's training images/s at batch 128 (float32, XLA, the default
# strategy, 2 cores): the trainer's train_images_per_second of a full-length run on
# each kind (compilation included).
IMAGES_PER_SECOND = {
    "AMD Zen 4": 1111,  # demo_accuracy.json, 2026-12-04 (seed 0, 4,800 steps)
    "Intel Sapphire Rapids": 1058,  # a bare clone's make demo, 2026-12-03
    "AMD Zen": 416,  # benchmarks/results/recipe/base_steps2100_seed0.json, 2026-12-05
}
# Kinds not in the table: the slowest measured kind of their class.
AVX512_KINDS = ("AMD Zen 4", "Intel Sapphire Rapids")

# Step counts are whole multiples of this: the warm-up (a fifteenth) and the
# checkpoints (thirds) are whole steps, and nearby budgets train the same steps.
STEP_QUANTUM = 30


def images_per_second(machine):
    """(images/s, where the figure comes from) for `machine` (cli/machine.machine_info)."""
    kind = machine.get("cpu_kind")
    if kind in IMAGES_PER_SECOND:
        return IMAGES_PER_SECOND[kind], f"measured on {kind}"
    if "avx512f" in machine.get("instruction_sets", ()):
        slowest = min(AVX512_KINDS, key=IMAGES_PER_SECOND.get)
        return IMAGES_PER_SECOND[slowest], f"{kind} not measured: as {slowest} (AVX-512)"
    slowest = min(IMAGES_PER_SECOND, key=IMAGES_PER_SECOND.get)
    return IMAGES_PER_SECOND[slowest], f"{kind} not measured: as {slowest}, the slowest"


def steps(machine, batch_size, budget_s=BUDGET_S):
    """(training steps of `batch_size` that fit `budget_s` seconds of `make demo` on
    `machine`, a line saying why). ValueError where the budget does not cover the
    time outside training."""
    rate, source = images_per_second(machine)
    train_s = budget_s - OVERHEAD_S
    if train_s <= 0:
        raise ValueError(
            f"--budget_s={budget_s:g}: below the {OVERHEAD_S} s the demo spends outside "
            "training (set-up, data, start-up, evaluations, exports)"
        )
    count = int(train_s * rate / batch_size) // STEP_QUANTUM * STEP_QUANTUM
    count = max(count, STEP_QUANTUM)
    why = (
        f"{count} steps of {batch_size}: {train_s:.0f} s of training in a {budget_s:.0f} s "
        f"budget at {rate} images/s ({source})"
    )
    return count, why


def flags(count):
    """The trainer flags of a `count`-step demo: the warm-up a fifteenth of it (the demo
    configs' share), a checkpoint at each third (what a preempted demo resumes from), the
    test split evaluated once, after training (a periodic test evaluation decides
    nothing in the run: each pass over the 10,000 test images costs about 10 s, 30
    steps, on the slowest kind)."""
    return [
        f"--config.total_steps={count}",
        f"--config.warmup_steps={count // 15}",
        f"--config.checkpoint_every={count // 3}",
        "--config.evals.test.every=0",
    ]
