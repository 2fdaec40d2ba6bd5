"""deploy/timing.py: which calls are timed, in which order (no time is asserted)."""

import pytest

from keras_vit_deploy import timing


def test_latency_times_repeats_calls_after_warmup_with_prepare_before_each():
    events = []
    result = timing.latency_ms(
        lambda i: events.append(("call", i)),
        repeats=3,
        warmup=2,
        prepare=lambda i: events.append(("prepare", i)),
    )
    assert events == [(kind, i) for i in range(5) for kind in ("prepare", "call")]
    assert result["repeats"] == 3
    assert set(result) == {"median_ms", "mean_ms", "repeats"}
    assert 0 <= result["median_ms"] and 0 <= result["mean_ms"]


def test_latency_without_prepare_calls_only_the_call():
    calls = []
    timing.latency_ms(calls.append, repeats=2, warmup=1)
    assert calls == [0, 1, 2]


def test_interleaved_runs_every_runtime_once_per_round_in_turn_and_keeps_the_median():
    order = []

    class Runtime:
        """A runtime whose `latency_ms` records its calls and returns given medians."""

        def __init__(self, name, medians):
            self.name, self.rounds = name, iter(medians)

        def latency_ms(self, pixels, repeats, warmup):
            order.append((self.name, pixels, repeats, warmup))
            return {"median_ms": next(self.rounds)}

    result = timing.interleaved_ms(
        {"a": Runtime("a", [5.0, 1.0, 3.0]), "b": Runtime("b", [2.0, 9.0, 4.0])},
        "PIXELS",
        rounds=3,
        repeats=7,
        warmup=1,
    )
    assert order == [(name, "PIXELS", 7, 1) for _ in range(3) for name in ("a", "b")]
    assert result == {"a": pytest.approx(3.0), "b": pytest.approx(4.0)}
