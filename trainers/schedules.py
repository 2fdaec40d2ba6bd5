"""Learning-rate schedule of the official code (vit_jax `create_learning_rate_schedule`)."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class WarmupDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup to `base_lr` over `warmup_steps`, then linear or cosine decay.

    progress = clip((step - warmup) / (total - warmup), 0, 1)
    linear:  lr = linear_end + (base_lr - linear_end) * (1 - progress)
    cosine:  lr = base_lr * 0.5 * (1 + cos(pi * progress))
    constant: lr = base_lr
    and, during warmup, lr *= step / warmup_steps.
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

    def __call__(self, step):
        step = ops.cast(step, "float32")
        lr = ops.convert_to_tensor(self.base_lr, "float32")
        if self.decay_type != "constant":
            progress = (step - self.warmup_steps) / max(self.total_steps - self.warmup_steps, 1)
            progress = ops.clip(progress, 0.0, 1.0)
            if self.decay_type == "linear":
                lr = self.linear_end + (self.base_lr - self.linear_end) * (1.0 - progress)
            else:
                lr = self.base_lr * 0.5 * (1.0 + ops.cos(math.pi * progress))
        if self.warmup_steps:
            lr = lr * ops.minimum(1.0, step / self.warmup_steps)
        return lr

    def get_config(self):
        return {
            "base_lr": self.base_lr,
            "total_steps": self.total_steps,
            "warmup_steps": self.warmup_steps,
            "decay_type": self.decay_type,
            "linear_end": self.linear_end,
        }
