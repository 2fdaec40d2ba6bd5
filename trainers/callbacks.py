"""What the training loop (trainers/train_lib.py) reports at its step boundaries: the
per-interval log line and record, TensorBoard points every `log_every` steps, the
profiler window and the progress bar. Each is told the step and the sums the train
step keeps (trainers/loop.py `TrainStep.read_sums`); none synchronises with the
devices on its own."""

import logging
import math
import time

import numpy as np
import tensorflow as tf

from keras_vit_cli import console
from keras_vit_trainers.summaries import write_scalar

log = logging.getLogger("trainers")


class TrainingDivergedError(RuntimeError):
    """The loss became NaN/inf; training stopped with the last good checkpoint kept."""


class Meter:
    """Sums of the train step's figures over some steps, and their means."""

    def __init__(self):
        self.sums, self.updates, self.seconds = {}, 0.0, 0.0

    def add(self, sums, seconds):
        updates = sums.get("updates", 0.0)
        for k, v in sums.items():
            if k != "updates":
                self.sums[k] = self.sums.get(k, 0.0) + v
        self.updates += updates
        self.seconds += seconds

    def means(self):
        n = max(self.updates, 1.0)
        return {k: v / n for k, v in self.sums.items()}

    def finite(self):
        return all(math.isfinite(v) for v in self.sums.values())


class RunLogger:
    """One log line, RUN/train_log.jsonl record and TensorBoard point per checkpoint
    interval (the means of its steps), and TensorBoard points every `log_every` steps
    (0: none) between them (the means since the previous point); images/s counts
    training time only (not evaluations or saves). An interval cut short (a
    preemption) is not logged: the resumed run logs its steps."""

    def __init__(self, every, global_batch, total_steps, run_dir=None, log_every=0):
        self.every, self.global_batch, self.total_steps = int(every), global_batch, total_steps
        self.run_dir = run_dir
        self.log_every = int(log_every or 0)
        summary_dir = run_dir.tensorboard("train") if run_dir else None
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.rates, self.last_logs = [], {}
        self.interval, self.window = Meter(), Meter()

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
        if self.log_every and self.writer and step % self.log_every == 0:
            self._write(step, self._scalars(self.window, extra))
            self.window = Meter()
        if step % self.every and step != self.total_steps and not force:
            return
        scalars = self._scalars(self.interval, extra)
        self.interval = Meter()
        self.rates.append(scalars["images_per_second"])
        self.last_logs = {**scalars, "step": step}
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
        if self.writer and not (self.log_every and step % self.log_every == 0):
            self._write(step, scalars)

    def images_per_second(self):
        """Median over intervals, leaving out the first (tracing/compilation) when possible."""
        rates = self.rates[1:] or self.rates
        return float(np.median(rates)) if rates else None


class ProfileWindow:
    """A TensorFlow profiler trace of the steps from `first` to `last` (config.
    profile_steps) in `logdir` (TensorBoard's profile tab reads LOGDIR/plugins/profile);
    the loop makes both step boundaries."""

    def __init__(self, first, last, logdir):
        self.first, self.last, self.logdir = int(first), int(last), logdir
        self._tracing = self._done = False

    def before_steps(self, step):
        if not (self._tracing or self._done) and self.first <= step < self.last:
            tf.profiler.experimental.start(self.logdir)
            self._tracing = True

    def after_steps(self, step):
        if self._tracing and step >= self.last:
            self.stop()

    def stop(self):
        if self._tracing:
            tf.profiler.experimental.stop()
            self._tracing, self._done = False, True
            log.info("profile of steps %d-%d written to %s", self.first, self.last, self.logdir)


class TrainingProgress:
    """The live progress bar (cli/console.py): steps of `total_steps`, loss, accuracy,
    images/s and ETA; one plain line every 30 s without a terminal."""

    def __init__(self, total_steps, global_batch, initial_step=0):
        self.bar = console.Progress(
            int(total_steps),
            "training",
            unit="step",
            initial=int(initial_step),
            scale=int(global_batch),
            scale_unit="image",
        )
        self._shown = int(initial_step)

    def update(self, step, logs=None):
        shown = {k: float(logs[k]) for k in ("loss", "accuracy") if logs and k in logs}
        self.bar.update(step - self._shown, **shown)
        self._shown = step

    def close(self):
        self.bar.close()


class Timer:
    """Seconds of training between step boundaries (what images/s counts)."""

    def __init__(self):
        self.t = time.perf_counter()

    def lap(self):
        now = time.perf_counter()
        seconds, self.t = now - self.t, now
        return seconds
