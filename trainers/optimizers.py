"""The paper's optimizers, with global-norm clipping of the *all-reduced* gradient.

Keras 3 clips in `Optimizer.apply` before the TF backend all-reduces gradients
across replicas, so `global_clipnorm` would clip each replica's partial gradient
and a 2-replica run would differ from a 1-device run on the same global batch.
These subclasses clip after the all-reduce (`_all_reduce_sum_gradients`), which
is the official semantics (clip the gradient of the global-batch loss).

Weight decay: Keras' AdamW applies `variable -= variable * weight_decay * lr`
(keras/src/optimizers/base_optimizer.py `_apply_weight_decay`, checked in Keras
3.15), i.e. decay coupled to the scheduled learning rate, as the official code
(param -= lr * wd * param; docs/design.md, "Recipes"). It decays every variable, as
the official code does.
"""

import keras
import tensorflow as tf


class _ClipAfterAllReduce:
    """Mixin: `clip_global_norm` applied to the summed (cross-replica) gradient."""

    def __init__(self, *args, clip_global_norm=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.clip_global_norm = clip_global_norm

    def _all_reduce_sum_gradients(self, grads_and_vars):
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.clip_global_norm:
            return grads_and_vars
        pairs = [(g, v) for g, v in grads_and_vars if g is not None]
        clipped, _ = tf.clip_by_global_norm([g for g, _ in pairs], self.clip_global_norm)
        clipped = iter(clipped)
        return [(None, v) if g is None else (next(clipped), v) for g, v in grads_and_vars]

    def get_config(self):
        return {**super().get_config(), "clip_global_norm": self.clip_global_norm}


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class AdamW(_ClipAfterAllReduce, keras.optimizers.AdamW):
    pass


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class SGD(_ClipAfterAllReduce, keras.optimizers.SGD):
    pass


def make_optimizer(config, learning_rate):
    """Optimizer from the config's `optimizer` ('adamw' | 'sgd') and its keys."""
    ema = float(config.get("ema_momentum") or 0.0)
    common = dict(
        learning_rate=learning_rate,
        clip_global_norm=config.get("grad_clip_norm"),
        use_ema=ema > 0,
        ema_momentum=ema or 0.99,
    )
    if config.optimizer == "adamw":
        return AdamW(
            beta_1=config.get("beta1", 0.9),
            beta_2=config.get("beta2", 0.999),
            weight_decay=config.get("weight_decay", 0.1),
            **common,
        )
    if config.optimizer == "sgd":
        wd = config.get("weight_decay") or None
        return SGD(momentum=config.get("momentum", 0.9), weight_decay=wd, **common)
    raise ValueError(f"config.optimizer={config.optimizer!r}: expected adamw or sgd")
