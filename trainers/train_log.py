"""What the run logs of its training (trainers/controller.py actions): one line, one
RUN/train_log.jsonl record and one TensorBoard point per checkpoint interval, TensorBoard
points every `log_every` steps, and the live progress bar. Each is given the figures
the controller read at a boundary (trainers/train_step.py `TrainStep.read_sums`); none
synchronises with the devices on its own."""

import logging

import numpy as np
import tensorflow as tf

from keras_vit_cli import console
from keras_vit_trainers import controller
from keras_vit_trainers.summaries import write_scalar

log = logging.getLogger("trainers")


class TrainingDivergedError(RuntimeError):
    """The loss became NaN/inf; training stopped with the last good checkpoint kept."""


class Meter:
    """Sums of the train step's figures over some steps, the seconds they took, and
    their means."""

    def __init__(self):
        self.sums, self.updates, self.seconds = {}, 0.0, 0.0

    def add(self, sums, seconds):
        for k, v in sums.items():
            if k != "updates":
                self.sums[k] = self.sums.get(k, 0.0) + v
        self.updates += sums.get("updates", 0.0)
        self.seconds += seconds

    def means(self):
        n = max(self.updates, 1.0)
        return {k: v / n for k, v in self.sums.items()}


class RunLogger(controller.Action):
    """One log line, RUN/train_log.jsonl record and TensorBoard point per checkpoint
    interval (`every`; the means of its steps), and TensorBoard points every
    `log_every` steps (0: none) between them (the means since the previous point);
    images/s counts training time only (not evaluations or saves). An interval cut
    short (a preemption) is not logged: the resumed run logs its steps.

    `recent`: the figures of the last `log_every` steps (of the last interval with
    log_every 0), what the progress bar shows; `last_logs`: the last interval's."""

    def __init__(self, every, global_batch, total_steps, run_dir=None, log_every=0):
        self.every, self.global_batch, self.total_steps = int(every), global_batch, total_steps
        self.run_dir = run_dir
        self.log_every = int(log_every or 0)
        summary_dir = run_dir.tensorboard("train") if run_dir else None
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.rates, self.last_logs, self.recent = [], {}, {}
        self.interval, self.window = Meter(), Meter()

    # --- its schedule (trainers/controller.py) --------------------------------------

    def next_step(self, step):
        wishes = [controller.next_multiple(step, p) for p in (self.every, self.log_every)]
        return min(s for s in wishes if s is not None)

    def due(self, step):
        return controller.itstime(step, self.every, self.total_steps) or controller.itstime(
            step, self.log_every
        )

    def after_steps(self, boundary):
        if boundary.read:
            self.add(boundary.step, boundary.sums, boundary.seconds, boundary.extra)

    def on_diverged(self, boundary):  # the steps where the loss diverged: logged, never saved
        self.add(boundary.step, boundary.sums, boundary.seconds, boundary.extra, force=True)

    # --- the records -----------------------------------------------------------------

    def _write(self, step, scalars):
        with self.writer.as_default(step=step):
            for k, v in scalars.items():
                write_scalar(f"train/{k}", v, step)
        self.writer.flush()

    def _scalars(self, meter, extra):
        rate = meter.updates * self.global_batch / max(meter.seconds, 1e-9)
        return {**meter.means(), **extra, "images_per_second": rate}

    def add(self, step, sums, seconds, extra, force=False):
        """`sums` of the steps up to `step`, trained in `seconds`; `extra`: the
        learning rate and gradient norm at `step`. `force`: log the interval so far now
        (the steps where the loss diverged)."""
        self.interval.add(sums, seconds)
        self.window.add(sums, seconds)
        window_end = controller.itstime(step, self.log_every)
        if window_end:
            self.recent = {**self._scalars(self.window, extra), "step": step}
            if self.writer:
                self._write(step, self.recent)
            self.window = Meter()
        if not (force or controller.itstime(step, self.every, self.total_steps)):
            return
        scalars = self._scalars(self.interval, extra)
        self.interval = Meter()
        self.rates.append(scalars["images_per_second"])
        self.last_logs = {**scalars, "step": step}
        if not self.log_every:
            self.recent = self.last_logs
        log.debug(
            "step %d/%d: loss %.4f, accuracy %.4f, lr %.3g, %.0f images/s",
            step,
            self.total_steps,
            scalars.get("loss", float("nan")),
            scalars.get("accuracy", float("nan")),
            scalars.get("learning_rate", float("nan")),
            scalars["images_per_second"],
        )
        if self.run_dir:
            self.run_dir.append_jsonl(
                self.run_dir.train_log, {"step": step, **{k: float(v) for k, v in scalars.items()}}
            )
        if self.writer and not window_end:
            self._write(step, scalars)

    def images_per_second(self):
        """Median over intervals, leaving out the first (tracing/compilation) when possible."""
        rates = self.rates[1:] or self.rates
        return float(np.median(rates)) if rates else None


class TrainingProgress(controller.Action):
    """The live progress bar (cli/console.py): steps of `total_steps`, the mean loss and
    accuracy of the last `log_every` steps (`logger.recent`), images/s and ETA; one
    plain line every 30 s without a terminal. `end_step()`, where given, is where
    training ends now (a time limit's shortened schedule): the bar's total follows it."""

    def __init__(self, logger, total_steps, global_batch, end_step=None):
        self.logger, self.total_steps, self.global_batch = logger, total_steps, global_batch
        self.end_step = end_step or (lambda: total_steps)
        self.bar, self._shown = None, 0

    def begin(self, step):
        self.bar = console.Progress(
            int(self.end_step()),
            "training",
            unit="step",
            initial=int(step),
            scale=int(self.global_batch),
            scale_unit="image",
        )
        self._shown = int(step)

    def after_steps(self, boundary):
        if self.end_step() != self.bar.total:
            self.bar.set_total(self.end_step())
        logs = self.logger.recent
        shown = {k: float(logs[k]) for k in ("loss", "accuracy") if k in logs}
        self.bar.update(boundary.step - self._shown, **shown)
        self._shown = boundary.step

    def end(self, step):
        if self.bar is not None:
            self.bar.close()
