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

    def __init__(self, steps_per_epoch):
        super().__init__()
        self.steps_per_epoch = steps_per_epoch
        self.bad_step = None
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)) and self.bad_step is None:
            self.bad_step = self._epoch * self.steps_per_epoch + batch + 1
            self.model.stop_training = True


class RunCheckpoint(keras.callbacks.BackupAndRestore):
    """BackupAndRestore that keeps its files and never overwrites a good checkpoint
    with a diverged (NaN) state."""

    def __init__(self, backup_dir, nan_guard):
        super().__init__(
            backup_dir, save_freq="epoch", double_checkpoint=True, delete_checkpoint=False
        )
        self.nan_guard = nan_guard

    def on_epoch_end(self, epoch, logs=None):
        loss = (logs or {}).get("loss")
        if self.nan_guard.bad_step is not None or (loss is not None and not math.isfinite(loss)):
            return
        super().on_epoch_end(epoch, logs)

    @staticmethod
    def saved_epoch(backup_dir):
        """The last checkpointed epoch in `backup_dir` (0: none). Keras'
        BackupAndRestore names this file; it is read only here."""
        path = os.path.join(backup_dir, "training_metadata.json")
        if not run_directory.exists(path):
            return 0
        try:
            with run_directory.open_file(path) as f:
                return int(json.load(f)["epoch"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise run_directory.RunDirectoryError(
                f"{path}: not the checkpoint's metadata ({type(e).__name__}: {e}); the "
                "checkpoint itself may be incomplete. Delete the checkpoints folder to "
                "start over, or restore it from its backup."
            ) from e


class RunLogger(keras.callbacks.Callback):
    """One log line and TensorBoard scalars per checkpoint interval; images/s."""

    def __init__(self, steps_per_epoch, global_batch, total_steps, run_dir=None):
        super().__init__()
        self.run_dir = run_dir
        summary_dir = run_dir.tensorboard("train") if run_dir else None
        self.steps_per_epoch = steps_per_epoch
        self.global_batch = global_batch
        self.total_steps = total_steps
        self.writer = tf.summary.create_file_writer(summary_dir) if summary_dir else None
        self.rates = []
        self.last_logs = {}

    def on_epoch_begin(self, epoch, logs=None):
        self._t0 = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._t0
        rate = self.steps_per_epoch * self.global_batch / seconds
        self.rates.append(rate)
        logs = dict(logs or {})
        step = (epoch + 1) * self.steps_per_epoch
        lr = self.model.optimizer.learning_rate
        lr = float(lr.numpy() if hasattr(lr, "numpy") else lr)
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
        if self.writer:
            with self.writer.as_default(step=step):
                for k, v in logs.items():
                    write_scalar(f"train/{k}", v, step)
                write_scalar("train/learning_rate", lr, step)
                write_scalar("train/images_per_second", rate, step)
            self.writer.flush()

    def images_per_second(self):
        """Median over intervals, leaving out the first (tracing/compilation) when possible."""
        rates = self.rates[1:] or self.rates
        return float(np.median(rates)) if rates else None


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
        if self.bar is not None:
            self.bar.close()
