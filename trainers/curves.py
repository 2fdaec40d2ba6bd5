"""The learning curve of a run as a PNG: train loss and eval accuracy against step."""

import json
import os

import tensorflow as tf


def _read_jsonl(path):
    if not path or not tf.io.gfile.exists(path):
        return []
    with tf.io.gfile.GFile(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _by_step(records, key):
    """{step: value} (the last record of a step wins, e.g. after a resume)."""
    return dict(sorted((int(r["step"]), float(r[key])) for r in records if key in r))


def write_learning_curve(train_log, eval_log, path, final=None, metric="accuracy", split="test"):
    """Draws train loss (left axis, per checkpoint interval) and the eval `metric` (right
    axis: every `eval_every` steps, and `final` = (step, value) of the final evaluation,
    the EMA weights' when EMA is on) against step into `path`. Returns `path`, or None when
    there is nothing to draw or matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    loss = _by_step(_read_jsonl(train_log), "loss")
    accuracy = _by_step(_read_jsonl(eval_log), metric)
    if not loss:
        return None
    fig, left = plt.subplots(figsize=(6.4, 3.6))
    left.plot(list(loss), list(loss.values()), color="tab:blue", marker=".", label="train loss")
    left.set_xlabel("step")
    left.set_ylabel("train loss", color="tab:blue")
    right = left.twinx()
    if accuracy:
        right.plot(
            list(accuracy),
            [100 * v for v in accuracy.values()],
            color="tab:orange",
            marker=".",
            label=f"{split} {metric}",
        )
    if final and final[1] is not None:
        right.plot(
            [final[0]],
            [100 * final[1]],
            color="tab:red",
            marker="*",
            markersize=12,
            linestyle="none",
            label=f"final {split} {metric} {100 * final[1]:.2f}%",
        )
    right.set_ylabel(f"{split} {metric} (%)", color="tab:orange")
    handles = left.get_legend_handles_labels()[0] + right.get_legend_handles_labels()[0]
    left.legend(handles, [h.get_label() for h in handles], loc="center right", fontsize=8)
    left.grid(alpha=0.3)
    fig.tight_layout()
    tf.io.gfile.makedirs(os.path.dirname(path) or ".")
    with tf.io.gfile.GFile(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return path
