"""The learning-rate schedule (trainers/schedules.py) against a NumPy reference of the
official code's (vit_jax `create_learning_rate_schedule`), and its shortening: what a
time limit does to it during training (trainers/time_limit.py)."""

import math

import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_vit_trainers import schedules

BASE_LR, TOTAL, WARMUP, LINEAR_END = 2e-3, 100, 10, 1e-5


def reference(step, decay_type, total=TOTAL, warmup=WARMUP):
    """vit_jax's schedule in float64."""
    lr = BASE_LR
    if decay_type != "constant":
        progress = np.clip((step - warmup) / max(total - warmup, 1), 0.0, 1.0)
        if decay_type == "linear":
            lr = LINEAR_END + (BASE_LR - LINEAR_END) * (1.0 - progress)
        else:
            lr = BASE_LR * 0.5 * (1.0 + np.cos(math.pi * progress))
    return lr * (np.minimum(1.0, step / warmup) if warmup else 1.0)


def shortened_reference(step, decay_type, at, end):
    """The shortened schedule in float64: the schedule until `at`, then the same decay
    from the learning rate at `at` to the end value at `end`."""
    if step < at:
        return reference(step, decay_type)
    start = reference(at, decay_type)
    progress = np.clip((step - at) / (end - at), 0.0, 1.0)
    if decay_type == "linear":
        return LINEAR_END + (start - LINEAR_END) * (1.0 - progress)
    if decay_type == "cosine":
        return start * 0.5 * (1.0 + np.cos(math.pi * progress))
    return start


def values(schedule, steps):
    return np.array([float(ops.convert_to_numpy(schedule(s))) for s in steps])


# float32 arithmetic on values of at most BASE_LR: a few ulps of BASE_LR.
ATOL = 8 * float(np.finfo(np.float32).eps) * BASE_LR


@pytest.mark.parametrize("decay_type", ["cosine", "linear", "constant"])
def test_the_schedule_is_the_official_codes(decay_type):
    schedule = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP, decay_type, LINEAR_END)
    steps = np.arange(0, TOTAL + 5)
    want = np.array([reference(s, decay_type) for s in steps])
    np.testing.assert_allclose(values(schedule, steps), want, rtol=0, atol=ATOL)


@pytest.mark.parametrize("decay_type", ["cosine", "linear", "constant"])
@pytest.mark.parametrize("at", [4, 40])  # during the warm-up, and during the decay
def test_a_shortened_schedule_restarts_its_decay_from_the_step_it_is_shortened_at(decay_type, at):
    plain = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP, decay_type, LINEAR_END)
    schedule = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP, decay_type, LINEAR_END)
    schedule.allow_shortening()
    steps = np.arange(0, TOTAL + 5)
    # Shortenable but not shortened: every step's learning rate is the plain one's.
    np.testing.assert_array_equal(values(schedule, steps), values(plain, steps))
    end = at + 30
    start_lr = schedule.shorten(at, end)
    assert start_lr == values(plain, [at])[0]  # continuous at the step it starts at
    got = values(schedule, steps)
    np.testing.assert_array_equal(got[:at], values(plain, steps)[:at])  # the past as it was
    want = np.array([shortened_reference(s, decay_type, at, end) for s in steps])
    np.testing.assert_allclose(got, want, rtol=0, atol=ATOL)
    assert np.all(np.diff(got[max(at, WARMUP) :]) <= 0)  # decays from there on
    end_value = {"cosine": 0.0, "linear": LINEAR_END, "constant": start_lr}[decay_type]
    np.testing.assert_allclose(got[end:], end_value, rtol=0, atol=ATOL)  # ended at `end`


def test_a_recorded_shortening_restores_the_same_learning_rates():
    first = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP).allow_shortening()
    recorded = (37, 61, first.shorten(37, 61))
    again = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP).allow_shortening()
    again.shorten(*recorded)
    steps = np.arange(0, TOTAL)
    np.testing.assert_array_equal(values(again, steps), values(first, steps))


def test_a_compiled_step_sees_the_shortening_without_being_traced_again():
    """The train step is traced and compiled once; a shortening during training is
    variables it reads, not a new graph."""
    schedule = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP).allow_shortening()
    traces = []

    @tf.function(jit_compile=True)
    def learning_rate(step):
        traces.append(step)
        return schedule(step)

    step = tf.constant(50, tf.int64)
    before = float(learning_rate(step))
    schedule.shorten(40, 50)
    after = float(learning_rate(step))
    assert len(traces) == 1
    assert before == pytest.approx(reference(50, "cosine"), abs=ATOL)
    assert after == pytest.approx(0.0, abs=ATOL)  # the shortened schedule's end


def test_shortening_is_refused_in_one_line_where_it_cannot_be_done():
    schedule = schedules.WarmupDecay(BASE_LR, TOTAL, WARMUP)
    with pytest.raises(ValueError, match=r"allow_shortening\(\) before the step is traced"):
        schedule.shorten(10, 20)
    schedule.allow_shortening()
    with pytest.raises(ValueError, match=r"shorten\(at=20, end=20\): expected 0 <= at < end"):
        schedule.shorten(20, 20)
