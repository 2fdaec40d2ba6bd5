"""The learning curve of a run as a PNG: train loss and eval accuracy against step."""

from keras_vit.run_directory import RunDirectory, open_file


def _by_step(records, key):
    """{step: value} (the last record of a step wins, e.g. after a resume)."""
    return dict(sorted((int(r["step"]), float(r[key])) for r in records if key in r))


def write_learning_curve(run, name=None, final=None, metric="accuracy", split="test"):
    """Draws train loss (left axis, per checkpoint interval, from RUN/train_log.jsonl)
    and the `metric` of evaluator `name` (right axis: its periodic results in
    RUN/eval_log.jsonl, and `final` = (step, value) of the final evaluation, the EMA
    weights' when EMA is on) against step into RUN/learning_curve.png (`run`: a
    keras_vit.run_directory.RunDirectory). Returns the path, or None when there is
    nothing to draw or matplotlib is missing."""
    path = run.learning_curve
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    loss = _by_step(RunDirectory.read_jsonl(run.train_log), "loss")
    records = [r for r in RunDirectory.read_jsonl(run.eval_log) if r.get("name") == name]
    accuracy = _by_step(records, metric)
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
    run.makedirs()
    with open_file(path, "wb") as f:
        fig.savefig(f, format="png", dpi=120)
    plt.close(fig)
    return path
