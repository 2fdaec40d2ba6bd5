"""The callbacks of the trainers' `fit` (trainers/train_lib.py): divergence guard,
resumable checkpoints, the per-interval log and the progress bar. The periodic
evaluators' callback is trainers/evaluators.py's."""

import json
import logging
import math
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import run_directory
from keras_vit_cli import console
from keras_vit_trainers.summaries import write_scalar

log = logging.getLogger("trainers")


class TrainingDivergedError(RuntimeError):
    """The loss became NaN/inf; training stopped with the last good checkpoint kept."""


class NanGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and remembers the step."""

    def __init__(self):
        super().__init__()
        self.bad_step = None
        self._first = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._first = optimizer_step(self.model)  # a resumed interval starts inside

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.bad_step is None:
            self.bad_step = self._first + batch + 1
            self.model.stop_training = True


def optimizer_step(model):
    """The model's optimizer step (updates applied so far), the run's one step count."""
    return int(keras.ops.convert_to_numpy(model.optimizer.iterations))


class RunCheckpoint(keras.callbacks.BackupAndRestore):
    """BackupAndRestore at every checkpoint interval (one Keras epoch of `every`
    steps) that keeps its files, never overwrites a good checkpoint with a diverged
    (NaN) state, and saves inside an interval on request (`save_step`: preemption,
    trainers/faults.py). Its metadata file (Keras': {"epoch", "batch"}) then holds the
    steps past the epoch's start in "batch": the checkpoint's step is
    epoch * every + batch (0 at interval ends, as Keras writes it). It restores once,
    in the first of the run's `fit` calls, and `fit` starts at the epoch the run's
    plan gives (trainers/train_lib.py), not at the one Keras' restore reads.
    Uses BackupAndRestore's `_save_model`, `_current_epoch` and `_last_batch_seen`
    (Keras 3.15; trainers/keras_workarounds.py's TESTED_KERAS; tests/test_train_faults.py)."""

    METADATA = "training_metadata.json"  # Keras' name for it; read only here
    PREVIOUS = ".bkp"  # the suffix of double_checkpoint's previous files

    def __init__(self, backup_dir, nan_guard, every):
        super().__init__(
            backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False
        )
        self.nan_guard, self.every = nan_guard, int(every)
        self._restored = False

    def on_train_begin(self, logs=None):
        if not self._restored:
            super().on_train_begin(logs)
            self._restored = True
        self.model._initial_epoch = None  # fit's initial_epoch is the plan's

    def on_epoch_begin(self, epoch, logs=None):
        self._current_epoch = epoch

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if self.nan_guard.bad_step is not None or (loss is not None and not math.isfinite(loss)):
            return
        if optimizer_step(self.model) != (epoch + 1) * self.every:
            return  # stopped inside the interval: save_step saved what was trained
        super().on_epoch_end(epoch, logs)

    def save_step(self):
        """Saves the state at the current step, inside an interval; returns the step."""
        step = optimizer_step(self.model)
        self._last_batch_seen = step - self._current_epoch * self.every
        self._save_model()
        return step

    @classmethod
    def _read_step(cls, path, every):
        if not run_directory.exists(path):
            return 0
        try:
            with run_directory.open_file(path) as f:
                metadata = json.load(f)
            return int(metadata["epoch"]) * int(every) + int(metadata.get("batch") or 0)
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise run_directory.RunDirectoryError(
                f"{path}: not the checkpoint's metadata ({type(e).__name__}: {e}); the "
                "checkpoint itself may be incomplete. Delete the checkpoints folder to "
                "start over, or restore it from its backup."
            ) from e

    @classmethod
    def saved_steps(cls, backup_dir, every):
        """(the newest checkpoint's step, the previous one's) in `backup_dir`; 0: none."""
        path = os.path.join(backup_dir, cls.METADATA)
        return cls._read_step(path, every), cls._read_step(path + cls.PREVIOUS, every)

    @classmethod
    def saved_step(cls, backup_dir, every):
        """The newest checkpoint's step in `backup_dir` (0: none)."""
        return cls.saved_steps(backup_dir, every)[0]

    @classmethod
    def use_previous(cls, backup_dir):
        """Makes the previous checkpoint the one restored (the workers agreed on it)."""
        for name in (cls.METADATA, "latest.weights.h5"):
            path = os.path.join(backup_dir, name)
            tf.io.gfile.copy(path + cls.PREVIOUS, path, overwrite=True)


class RunLogger(keras.callbacks.Callback):
    """One log line, RUN/train_log.jsonl record and TensorBoard point per checkpoint
    interval, and TensorBoard points every `log_every` steps (0: none) between them;
    images/s.

    The points between intervals are the means of the steps since the previous
    point (at most `log_every`), from the running means Keras reports at each
    batch end; `train/learning_rate` is the rate at the point's step. An interval
    cut short (a preemption) is not logged: the resumed run logs its steps."""

    def __init__(self, steps_per_epoch, global_batch, total_steps, run_dir=None, log_every=0):
        super().__init__()
        self.run_dir = run_dir
        summary_dir = run_dir.tensorboard("train") if run_dir else None
        self.steps_per_epoch = steps_per_epoch
        self.global_batch = global_batch
        self.total_steps = total_steps
        self.log_every = int(log_every or 0)
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.rates = []
        self.last_logs = {}

    def _learning_rate(self):
        lr = self.model.optimizer.learning_rate
        return float(lr.numpy() if hasattr(lr, "numpy") else lr)

    def _gradient_norm(self):
        """{"gradient_norm": the last step's global norm before clipping} where the
        optimizer keeps it (trainers/keras_workarounds.py ClipAfterAllReduce), else {}."""
        optimizer = self.model.optimizer
        norm = getattr(getattr(optimizer, "inner_optimizer", optimizer), "gradient_norm", None)
        return {} if norm is None else {"gradient_norm": float(norm.numpy())}

    def _write(self, step, scalars):
        with self.writer.as_default(step=step):
            for k, v in scalars.items():
                write_scalar(f"train/{k}", v, step)
        self.writer.flush()

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()
        self._first = optimizer_step(self.model)
        # the window of the next per-step point: (steps into the interval, their means, time)
        self._window = (0, {}, self._t0)

    def on_train_batch_end(self, batch, logs=None):
        if not (self.log_every and self.writer and logs):
            return
        done, step = batch + 1, self._first + batch + 1
        before, means, t_before = self._window
        if step // self.log_every == (self._first + before) // self.log_every:
            return  # no multiple of log_every among this execution's steps
        now = time.perf_counter()
        current = {k: float(v) for k, v in logs.items() if np.ndim(v) == 0}
        scalars = {
            k: (done * v - before * means.get(k, 0.0)) / (done - before) for k, v in current.items()
        }
        scalars.update(
            learning_rate=self._learning_rate(),
            images_per_second=(done - before) * self.global_batch / max(now - t_before, 1e-9),
            **self._gradient_norm(),
        )
        self._write(step, scalars)
        self._window = (done, current, now)

    def on_epoch_end(self, epoch, logs=None):
        step = optimizer_step(self.model)
        if step % self.steps_per_epoch:
            return  # stopped inside the interval
        seconds = time.perf_counter() - self._t0
        rate = (step - self._first) * self.global_batch / seconds
        self.rates.append(rate)
        logs = dict(logs or {})
        lr = self._learning_rate()
        logs.update(self._gradient_norm())
        self.last_logs = {**logs, "step": step}
        log.debug(
            "step %d/%d: loss %.4f, accuracy %.4f, lr %.3g, %.0f images/s",
            step,
            self.total_steps,
            logs.get("loss", float("nan")),
            logs.get("accuracy", float("nan")),
            lr,
            rate,
        )
        if self.run_dir:
            record = {"step": step, **{k: float(v) for k, v in logs.items()}}
            record.update(learning_rate=lr, images_per_second=rate)
            self.run_dir.append_jsonl(self.run_dir.train_log, record)
        if self.writer and not (self.log_every and step % self.log_every == 0):
            self._write(step, {**logs, "learning_rate": lr, "images_per_second": rate})

    def images_per_second(self):
        """Median over intervals, leaving out the first (tracing/compilation) when possible."""
        rates = self.rates[1:] or self.rates
        return float(np.median(rates)) if rates else None


class ProfileWindow(keras.callbacks.Callback):
    """A TensorFlow profiler trace of the steps from `first` to `last` (optimizer
    steps; config.profile_steps) in `logdir` (TensorBoard's profile tab reads it from
    LOGDIR/plugins/profile). With steps_per_execution > 1 the trace covers the
    executions that hold those steps."""

    def __init__(self, first, last, logdir):
        super().__init__()
        self.first, self.last, self.logdir = int(first), int(last), logdir
        self._tracing = self._done = False

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_first = optimizer_step(self.model)

    def on_train_batch_begin(self, batch, logs=None):
        step = self._epoch_first + batch  # steps done before this batch
        if not (self._tracing or self._done) and self.first <= step < self.last:
            tf.profiler.experimental.start(self.logdir)
            self._tracing = True

    def on_train_batch_end(self, batch, logs=None):
        if self._tracing and self._epoch_first + batch + 1 >= self.last:
            self._stop()

    def on_train_end(self, logs=None):
        if self._tracing:
            self._stop()

    def _stop(self):
        tf.profiler.experimental.stop()
        self._tracing, self._done = False, True
        log.info("profile of steps %d-%d written to %s", self.first, self.last, self.logdir)


class TrainingProgress(keras.callbacks.Callback):
    """The live progress bar of `fit` (cli/console.py): steps of `total_steps`,
    loss, accuracy, images/s and ETA; one plain line every 30 s without a terminal.
    Counts steps itself and reads the logs at most twice a second, so it adds no
    device synchronisation of its own."""

    def __init__(
        self, total_steps, global_batch, initial_step=0, steps_per_execution=1, refresh_seconds=0.5
    ):
        super().__init__()
        self.total_steps, self.global_batch = int(total_steps), int(global_batch)
        self.initial_step, self.spe = int(initial_step), int(steps_per_execution)
        self.refresh_seconds = float(refresh_seconds)
        self.bar = None

    def on_train_begin(self, logs=None):
        if self.bar is not None:
            return  # the run's next `fit` call (trainers/train_lib.py): one bar
        self.bar = console.Progress(
            self.total_steps,
            "training",
            unit="step",
            initial=self.initial_step,
            scale=self.global_batch,
            scale_unit="image",
        )
        self._step, self._shown, self._last = self.initial_step, self.initial_step, 0.0

    def on_train_batch_end(self, batch, logs=None):
        self._step = min(self._step + self.spe, self.total_steps)
        now = time.perf_counter()
        if now - self._last >= self.refresh_seconds or self._step == self.total_steps:
            self._last = now
            shown = {k: float(logs[k]) for k in ("loss", "accuracy") if logs and k in logs}
            self.bar.update(self._step - self._shown, **shown)
            self._shown = self._step

    def on_train_end(self, logs=None):
        if self.bar is not None and (self._step >= self.total_steps or self.model.stop_training):
            self.bar.close()
