"""Gradient accumulation (config.grad_accum_steps): N micro-batches give the update of
one N-times-larger batch; schedule, EMA and step count follow updates."""
import keras
import ml_collections
import numpy as np

from trainers import optimizers
from trainers import schedules

STEPS, ACCUM, BATCH = 3, 4, 16


def _config(**kw):
  return ml_collections.ConfigDict(dict(optimizer="sgd", momentum=0.9, weight_decay=0.0,
                                        grad_clip_norm=0.05, **kw))


def _train(accum, x, y, ema=0.5):
  keras.utils.set_random_seed(3)
  model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(5, activation="tanh"),
                            keras.layers.Dense(3)])
  lr = schedules.WarmupDecay(0.5, STEPS, warmup_steps=1, decay_type="linear",
                             steps_per_update=accum)
  optimizer = optimizers.make_optimizer(_config(grad_accum_steps=accum, ema_momentum=ema), lr)
  model.compile(optimizer=optimizer, jit_compile=False,
                loss=keras.losses.CategoricalCrossentropy(from_logits=True))
  # fit ends with optimizer.finalize_variable_values: the weights are the EMA's.
  model.fit(x, y, batch_size=BATCH // accum, epochs=1, shuffle=False, verbose=0)
  return model, [np.array(w) for w in model.get_weights()]


def test_accumulated_micro_batches_equal_one_big_batch():
  rng = np.random.default_rng(0)
  x = rng.standard_normal((STEPS * BATCH, 6)).astype("float32")
  y = np.eye(3, dtype="float32")[rng.integers(0, 3, STEPS * BATCH)]
  big, big_ema = _train(1, x, y)
  accum, accum_ema = _train(ACCUM, x, y)
  _, big_weights = _train(1, x, y, ema=0.0)
  _, accum_weights = _train(ACCUM, x, y, ema=0.0)
  # The step counter counts updates, so the schedule and EMA saw the same steps.
  assert int(big.optimizer.iterations) == int(accum.optimizer.iterations) == STEPS
  # Clipping at 0.05 is active (the raw gradient norm is ~1): were it applied to each
  # micro-batch instead of their mean, or the learning rate read at the micro-batch
  # counter, the weights would differ by O(lr * 0.05) = 1e-2. The mean of 4 float32
  # micro-batch gradients differs from the big batch's by a few float32 roundings of
  # the gradient (~1e-7 relative), carried into the weights by 3 updates of lr <= 0.5.
  for a, b in zip(accum_weights, big_weights):
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  for a, b in zip(accum_ema, big_ema):  # one EMA update per update, not per micro-batch
    np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
  assert max(np.abs(a - b).max() for a, b in zip(big_ema, big_weights)) > 1e-3  # EMA on


def test_schedule_counts_updates():
  lr = schedules.WarmupDecay(1.0, 10, warmup_steps=2, decay_type="linear", linear_end=0.0,
                             steps_per_update=4)
  plain = schedules.WarmupDecay(1.0, 10, warmup_steps=2, decay_type="linear", linear_end=0.0)
  for micro in range(40):
    assert float(lr(micro)) == float(plain(micro // 4))
  assert schedules.WarmupDecay.from_config(lr.get_config()).steps_per_update == 4
