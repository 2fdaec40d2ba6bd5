"""The paper's optimizers, with global-norm clipping of the *all-reduced* gradient.

Keras 3's own `global_clipnorm` would clip each replica's partial gradient; these
subclasses clip the all-reduced one, the official semantics, through
trainers/keras_workarounds.py's `ClipAfterAllReduce` (why, and its tests, there).

Weight decay: Keras' AdamW applies `variable -= variable * weight_decay * lr`
(keras/src/optimizers/base_optimizer.py `_apply_weight_decay`, checked in Keras
3.15), i.e. decay coupled to the scheduled learning rate, as the official code
(param -= lr * wd * param; docs/design.md, "Recipes"). It decays every variable, as
the official code does.
"""

import keras
from keras_vit_trainers.keras_workarounds import ClipAfterAllReduce


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class AdamW(ClipAfterAllReduce, keras.optimizers.AdamW):
    pass


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class SGD(ClipAfterAllReduce, keras.optimizers.SGD):
    pass


def make_optimizer(config, learning_rate):
    """Optimizer from the config's `optimizer` ('adamw' | 'sgd') and its keys."""
    ema = float(config.ema_momentum or 0.0)
    common = dict(
        learning_rate=learning_rate,
        clip_global_norm=config.grad_clip_norm,
        use_ema=ema > 0,
        ema_momentum=ema or 0.99,
    )
    if config.optimizer == "adamw":
        return AdamW(
            beta_1=config.beta1,
            beta_2=config.beta2,
            weight_decay=config.weight_decay,
            **common,
        )
    if config.optimizer == "sgd":
        return SGD(momentum=config.momentum, weight_decay=config.weight_decay or None, **common)
    raise ValueError(f"config.optimizer={config.optimizer!r}: expected adamw or sgd")
