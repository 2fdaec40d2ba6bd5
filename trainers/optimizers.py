"""The paper's optimizers and the fine-tuning controls: layer-wise learning-rate decay
and weight-decay exclusions. Global-norm clipping of the all-reduced gradient is the
training step's (trainers/train_step.py), since Keras' own `global_clipnorm` would clip each
replica's partial gradient.

Weight decay: Keras' AdamW applies `variable -= variable * weight_decay * lr`
(keras/src/optimizers/base_optimizer.py `_apply_weight_decay`, checked in Keras
3.15), i.e. decay coupled to the scheduled learning rate, as the official code
(param -= lr * wd * param; docs/design.md, "Recipes"). By default it decays every
variable, as the official code does; `config.weight_decay_exclude` names variables to
leave undecayed through Keras' own `exclude_from_weight_decay` (matched against
`variable.name`, the last part of its path: `bias`, `gamma`, `pos_embedding`, ...).

Layer-wise learning-rate decay (`config.layer_decay` < 1; trainers/layer_decay.py
says which variable is which layer): `update_step`, the per-variable hook Keras
optimizers are written in, runs with the variable's learning rate, and the coupled
weight decay is applied there with that same learning rate (Keras' own
`_apply_weight_decay` would use the unscaled one).
"""

import re

import keras
from keras import ops

from keras_vit_trainers import layer_decay as layer_decay_lib


def _copies(variable):
    """The tf.Variables that hold a Keras variable: one per device under a strategy."""
    import tensorflow as tf

    value = variable.value if isinstance(variable, keras.Variable) else variable
    try:
        return list(tf.distribute.get_strategy().experimental_local_results(value))
    except (TypeError, ValueError):
        return [value]


class _Rules:
    """The per-variable rules, held outside TensorFlow's attribute tracking (which
    would wrap a dict keyed by ints and then refuse to checkpoint the optimizer)."""

    def __init__(self, rules):
        self.rules = rules

    def of(self, variable):
        """The rule of `variable`: the tf.Variable (on one device) that Keras' update
        hands `update_step`, or a Keras variable."""
        if isinstance(variable, keras.Variable):
            variable = variable.value
        return self.rules[id(variable)]


class LayerwiseLearningRate:
    """Optimizer mixin: each variable's update uses `learning_rate` times its layer's
    multiplier, `layer_decay ** (L + 1 - layer id)` (trainers/layer_decay.py); coupled
    weight decay likewise. `layer_decay=1.0` leaves the optimizer as Keras has it."""

    def __init__(self, *args, layer_decay=1.0, weight_decay_exclude=(), **kwargs):
        layer_decay = float(layer_decay)
        weight_decay = kwargs.get("weight_decay")
        if layer_decay != 1.0:  # applied per variable in update_step instead
            kwargs["weight_decay"] = 0.0  # (AdamW refuses None)
        super().__init__(*args, **kwargs)
        self.layer_decay = layer_decay
        self.decay_each_layer = layer_decay != 1.0
        self.layer_weight_decay = weight_decay
        self.weight_decay_exclude = tuple(weight_decay_exclude or ())

    def build(self, var_list):
        if self.weight_decay_exclude and not self.decay_each_layer:
            self.exclude_from_weight_decay(var_names=list(self.weight_decay_exclude))
        super().build(var_list)
        scales = layer_decay_lib.scales([v.path for v in var_list], self.layer_decay)
        rules = {}  # id(the tf.Variable on one device) -> (learning-rate scale, decays)
        for variable, scale in zip(var_list, scales):
            decays = not any(re.search(n, variable.name) for n in self.weight_decay_exclude)
            for copy in _copies(variable):
                rules[id(copy)] = (scale, decays)
        self.layer_rules = _Rules(rules)

    def update_step(self, gradient, variable, learning_rate):
        if not self.decay_each_layer:
            return super().update_step(gradient, variable, learning_rate)
        scale, decays = self.layer_rules.of(variable)
        learning_rate = ops.cast(learning_rate, variable.dtype) * scale
        if self.layer_weight_decay and decays:
            wd = ops.cast(self.layer_weight_decay, variable.dtype)
            variable.assign(variable - variable * wd * learning_rate)
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        config = {
            **super().get_config(),
            "layer_decay": self.layer_decay,
            "weight_decay_exclude": list(self.weight_decay_exclude),
        }
        if self.decay_each_layer:
            config["weight_decay"] = self.layer_weight_decay
        return config


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class AdamW(LayerwiseLearningRate, keras.optimizers.AdamW):
    pass


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class SGD(LayerwiseLearningRate, keras.optimizers.SGD):
    pass


def make_optimizer(config, learning_rate):
    """Optimizer from the config's `optimizer` ('adamw' | 'sgd') and its keys,
    `layer_decay` and `weight_decay_exclude` included."""
    ema = float(config.ema_momentum or 0.0)
    common = dict(
        learning_rate=learning_rate,
        use_ema=ema > 0,
        ema_momentum=ema or 0.99,
        layer_decay=config.get("layer_decay", 1.0),
        weight_decay_exclude=tuple(config.get("weight_decay_exclude") or ()),
    )
    if config.optimizer == "adamw":
        optimizer = AdamW(
            beta_1=config.beta1,
            beta_2=config.beta2,
            weight_decay=config.weight_decay,
            **common,
        )
    elif config.optimizer == "sgd":
        optimizer = SGD(
            momentum=config.momentum, weight_decay=config.weight_decay or None, **common
        )
    else:
        raise ValueError(f"config.optimizer={config.optimizer!r}: expected adamw or sgd")
    return optimizer
