"""Training objectives, by name (`config.objective`).

An objective says what the model predicts and how it is scored; the loop in
train_lib.py is the same for all. To add one (e.g. the paper's masked patch
prediction, `--config.objective=masked_patch`), subclass `Objective` and
decorate it with `@register("masked_patch")`:

  build_model(make_model, config, num_classes) -> keras.Model
      `make_model(**overrides)` builds the configured ViT; wrap or extend it here.
  map_batch(config, num_classes) -> fn((images, labels)) -> (inputs, targets) | None
      applied to each per-replica batch inside tf.data (targets may come from images).
  loss(config) / metrics(config): handed to `model.compile`; metrics include one named
      `metric_name` and one named `loss_metric_name` (the per-example loss, so that
      evaluation's zero-weight padding is excluded).
  metric_name: the accuracy-like metric, reported as train and eval accuracy.
  loss_metric_name: the loss the `classification` evaluator reports as `<name>_loss`.
"""

import keras
import tensorflow as tf
from keras import ops

OBJECTIVES = {}


def register(name):
    def wrap(cls):
        OBJECTIVES[name] = cls
        cls.name = name
        return cls

    return wrap


def get(name):
    if name not in OBJECTIVES:
        raise ValueError(
            f"config.objective={name!r}: expected one of {', '.join(sorted(OBJECTIVES))}"
        )
    return OBJECTIVES[name]()


class Objective:
    name = None
    metric_name = "accuracy"
    loss_metric_name = "cross_entropy"

    def build_model(self, make_model, config, num_classes):
        return make_model(num_classes=num_classes)

    def map_batch(self, config, num_classes):
        return None

    def loss(self, config):
        raise NotImplementedError

    def metrics(self, config):
        return []

    def train_metrics(self, config):
        """{name: fn(y_true, y_pred) -> per-example values}: what the training loop
        logs beside the loss (trainers/train_step.py)."""
        return {}


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
class SigmoidCrossEntropy(keras.losses.Loss):
    """Sigmoid cross-entropy summed over classes, averaged over examples (vit_jax
    `sigmoid_xent`), for multi-label data such as ImageNet-21k."""

    def __init__(self, label_smoothing=0.0, name="sigmoid_cross_entropy", **kwargs):
        super().__init__(name=name, **kwargs)
        self.label_smoothing = label_smoothing

    def call(self, y_true, y_pred):
        y_true = ops.cast(y_true, y_pred.dtype)
        if self.label_smoothing:
            y_true = y_true * (1.0 - self.label_smoothing) + 0.5 * self.label_smoothing
        return ops.sum(ops.binary_crossentropy(y_true, y_pred, from_logits=True), axis=-1)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}


@keras.saving.register_keras_serializable(package="keras_vit_trainers")
def top1_accuracy(y_true, y_pred):
    """1 when the top-scoring class is one of the labels (precision@1; for one-hot
    labels, plain accuracy)."""
    top = ops.argmax(y_pred, axis=-1)
    return ops.take_along_axis(ops.cast(y_true, "float32"), top[:, None], axis=-1)[:, 0]


@register("classification")
class Classification(Objective):
    """Supervised classification: softmax (default) or sigmoid (`config.loss='sigmoid'`)
    cross-entropy on one-hot / multi-hot labels, optional label smoothing."""

    def map_batch(self, config, num_classes):
        def fn(images, labels):
            if labels.shape.rank == 1:  # single-label int -> one-hot
                labels = tf.one_hot(labels, num_classes)
            return images, labels

        return fn

    def loss(self, config, reduction="sum_over_batch_size"):
        smoothing = float(config.get("label_smoothing") or 0.0)
        kind = config.get("loss", "softmax")
        if kind == "softmax":
            return keras.losses.CategoricalCrossentropy(
                from_logits=True, label_smoothing=smoothing, reduction=reduction
            )
        if kind == "sigmoid":
            return SigmoidCrossEntropy(label_smoothing=smoothing, reduction=reduction)
        raise ValueError(f"config.loss={kind!r}: expected softmax or sigmoid")

    def train_metrics(self, config):
        return {self.metric_name: top1_accuracy}

    def metrics(self, config):
        return [
            keras.metrics.MeanMetricWrapper(top1_accuracy, name=self.metric_name),
            keras.metrics.MeanMetricWrapper(
                self.loss(config, reduction=None), name=self.loss_metric_name
            ),
        ]
