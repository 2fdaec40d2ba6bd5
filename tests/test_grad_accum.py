"""Gradient accumulation (config.grad_accum_steps, trainers/train_step.py): an update from N
micro-batches equals the update from one batch of them."""

import keras
import ml_collections
import numpy as np
import pytest
import tensorflow as tf

from keras_vit_trainers import optimizers, schedules, train_step

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)

STEPS, ACCUM, BATCH = 3, 4, 16


def _train(accum, x, y, ema=0.5):
    keras.utils.set_random_seed(3)
    model = keras.Sequential(
        [keras.Input((6,)), keras.layers.Dense(5, activation="tanh"), keras.layers.Dense(3)]
    )
    lr = schedules.WarmupDecay(0.5, STEPS, warmup_steps=1, decay_type="linear")
    config = ml_collections.ConfigDict(
        dict(optimizer="sgd", momentum=0.9, weight_decay=0.0, grad_clip_norm=0.05, ema_momentum=ema)
    )
    optimizer = optimizers.make_optimizer(config, lr)
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    accuracy = {"accuracy": keras.metrics.categorical_accuracy}
    strategy = tf.distribute.get_strategy()
    step = train_step.TrainStep(
        model, optimizer, loss, accuracy, strategy, accum=accum, clip_norm=config.grad_clip_norm
    )
    step.build()
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH)
    step.run(iter(data), STEPS)
    logs = step.read_sums()
    if ema:  # the trainer ends with the EMA's weights
        optimizer.finalize_variable_values(model.trainable_variables)
    return model, [np.array(w) for w in model.get_weights()], logs


def test_accumulated_micro_batches_equal_one_big_batch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((STEPS * BATCH, 6)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, STEPS * BATCH)]
    big, big_ema, big_logs = _train(1, x, y)
    accum, accum_ema, accum_logs = _train(ACCUM, x, y)
    _, big_weights, _ = _train(1, x, y, ema=0.0)
    _, accum_weights, _ = _train(ACCUM, x, y, ema=0.0)
    # One optimizer step per batch: the schedule and the EMA saw the same steps.
    assert big_logs["updates"] == accum_logs["updates"] == STEPS
    # Clipping at 0.05 is active (the raw gradient norm is ~1): clipped per micro-batch,
    # the weights would differ by O(lr * 0.05) = 1e-2. The mean of 4 float32 micro-batch
    # gradients differs from the big batch's by a few roundings (~1e-7 relative), carried
    # into the weights by 3 updates of lr <= 0.5.
    for a, b in zip(accum_weights, big_weights):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    for a, b in zip(accum_ema, big_ema):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    assert max(np.abs(a - b).max() for a, b in zip(big_ema, big_weights)) > 1e-3  # EMA on
    # The logged loss and accuracy are means over all examples either way.
    np.testing.assert_allclose(accum_logs["loss"], big_logs["loss"], rtol=1e-5)
    np.testing.assert_allclose(accum_logs["accuracy"], big_logs["accuracy"], rtol=1e-6)
    assert accum_logs["updates"] == big_logs["updates"] == STEPS


def test_batch_not_divisible_is_refused():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    strategy = tf.distribute.get_strategy()
    step = train_step.TrainStep(
        model, keras.optimizers.SGD(), keras.losses.MeanSquaredError(), {}, strategy, accum=3
    )
    step.build()
    data = tf.data.Dataset.from_tensors((np.zeros((4, 2), "float32"), np.zeros((4, 1), "float32")))
    with pytest.raises(ValueError, match="grad_accum_steps=3 must divide"):
        step.run(iter(data.repeat()), 1)


def test_one_update_is_plain_sgd_on_the_batch_mean_loss():
    """The step's update, by hand: w - lr * d(mean loss)/dw (no momentum, no clipping)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, 6)).astype("float32")
    y = np.eye(3, dtype="float32")[rng.integers(0, 3, BATCH)]
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(3)])
    before = [np.array(w) for w in model.get_weights()]
    loss = keras.losses.CategoricalCrossentropy(from_logits=True)
    with tf.GradientTape() as tape:
        value = loss(y, model(x))
    grads = [np.array(g) for g in tape.gradient(value, model.trainable_variables)]
    step = train_step.TrainStep(
        model, keras.optimizers.SGD(0.5), loss, {}, tf.distribute.get_strategy()
    )
    step.build()
    step.run(iter(tf.data.Dataset.from_tensors((x, y))), 1)
    for w, w0, g in zip(model.get_weights(), before, grads):
        np.testing.assert_allclose(w, w0 - 0.5 * g, rtol=1e-6, atol=1e-7)
    logs = step.read_sums()
    np.testing.assert_allclose(logs["loss"], float(value), rtol=1e-6)
    np.testing.assert_allclose(
        step.gradient_norm.numpy(), np.sqrt(sum((g**2).sum() for g in grads)), rtol=1e-6
    )
