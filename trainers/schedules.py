"""Learning-rate schedule of the official code (vit_jax `create_learning_rate_schedule`),
whose end a time limit may bring forward during training (trainers/time_limit.py)."""

import math

import keras
from keras import ops

# The shortening's step before any: beyond every run's steps, exact in float32.
NEVER = 2.0**31


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `base_lr` over `warmup_steps`, then linear or cosine decay.

    progress = clip((step - warmup) / (total - warmup), 0, 1)
    linear:  lr = linear_end + (base_lr - linear_end) * (1 - progress)
    cosine:  lr = base_lr * 0.5 * (1 + cos(pi * progress))
    constant: lr = base_lr
    and, during warmup, lr *= step / warmup_steps.

    Shortened (`allow_shortening`, then `shorten(at, end)`): from step `at` on, the
    same decay restarts from the learning rate of step `at` (lr_at) and ends at `end`
    instead of `total_steps`: progress = clip((step - at) / (end - at), 0, 1), then
    cosine: lr = lr_at * 0.5 * (1 + cos(pi * progress)); linear: lr = linear_end +
    (lr_at - linear_end) * (1 - progress); constant: lr = lr_at. The steps before `at`
    keep their learning rates, and step `at` its own (the curve is continuous).
    """

    def __init__(self, base_lr, total_steps, warmup_steps=0, decay_type="cosine", linear_end=1e-5):
        if decay_type not in ("linear", "cosine", "constant"):
            raise ValueError(f"decay_type={decay_type!r}: expected linear, cosine or constant")
        if total_steps <= warmup_steps and decay_type != "constant":
            raise ValueError(f"total_steps={total_steps} must exceed warmup_steps={warmup_steps}")
        self.base_lr = float(base_lr)
        self.total_steps = int(total_steps)
        self.warmup_steps = int(warmup_steps)
        self.decay_type = decay_type
        self.linear_end = float(linear_end)
        self._shortening = None  # (at, end, lr_at) variables once allowed

    def _decay(self, start_lr, progress):
        if self.decay_type == "linear":
            return self.linear_end + (start_lr - self.linear_end) * (1.0 - progress)
        if self.decay_type == "cosine":
            return start_lr * 0.5 * (1.0 + ops.cos(math.pi * progress))
        return start_lr

    def _scheduled(self, step):
        lr = ops.convert_to_tensor(self.base_lr, "float32")
        if self.decay_type != "constant":
            progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
            lr = self._decay(lr, ops.clip(progress, 0.0, 1.0))
        if self.warmup_steps:
            lr = lr * ops.minimum(1.0, step / self.warmup_steps)
        return lr

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = self._scheduled(step)
        if self._shortening is None:
            return lr
        at, end, start_lr = self._shortening
        progress = ops.clip((step - at) / ops.maximum(end - at, 1.0), 0.0, 1.0)
        return ops.where(step >= at, self._decay(start_lr, progress), lr)

    def allow_shortening(self):
        """Makes `shorten` possible: three float32 variables (the step the shortening
        starts at, NEVER until then; its end; the learning rate there) that the traced
        train step reads. Call it under the strategy's scope before the step is traced.
        Returns self."""
        if self._shortening is None:
            self._shortening = tuple(
                keras.Variable(value, dtype="float32", trainable=False, name=name)
                for value, name in (
                    (NEVER, "shortened_at"),
                    (NEVER + 1, "shortened_end"),
                    (0.0, "shortened_lr"),
                )
            )
        return self

    def shorten(self, at, end, learning_rate=None):
        """Ends the schedule at step `end` instead of `total_steps`, the decay restarting
        at step `at` (at < end) from that step's learning rate, or from `learning_rate`
        where given (a recorded shortening, restored as it was). Returns the learning rate
        at `at` (a float, what a record keeps)."""
        if self._shortening is None:
            raise ValueError("shorten() needs allow_shortening() before the step is traced")
        if not 0 <= at < end:
            raise ValueError(f"shorten(at={at}, end={end}): expected 0 <= at < end")
        if learning_rate is None:
            learning_rate = float(ops.convert_to_numpy(self._scheduled(ops.cast(at, "float32"))))
        for variable, value in zip(self._shortening, (at, end, learning_rate)):
            variable.assign(value)
        return learning_rate

    @property
    def shortenable(self):
        """Whether `allow_shortening` made `shorten` possible."""
        return self._shortening is not None

    def get_config(self):
        return {
            "base_lr": self.base_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay_type": self.decay_type,
            "linear_end": self.linear_end,
        }
