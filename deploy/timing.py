"""Latency per call as the export reports and the benchmarks give it: the one timing
loop of the runtimes (`deploy/runtime.py`: the TFLite interpreter, onnxruntime and
the Keras model) and of benchmarks/, and their interleaved comparison."""

import time

import numpy as np


def latency_ms(call, repeats=200, warmup=20, prepare=None):
    """{'median_ms', 'mean_ms', 'repeats'}: the milliseconds (`time.perf_counter`) that
    each of the calls `call(i)`, i = warmup, ..., warmup + repeats - 1, takes after
    `warmup` untimed ones (i = 0, ..., warmup - 1). `prepare(i)`, when given, runs
    before call i, outside the timing (e.g. setting an interpreter's input)."""
    times = []
    for i in range(warmup + repeats):
        if prepare is not None:
            prepare(i)
        start = time.perf_counter()
        call(i)
        if i >= warmup:
            times.append(time.perf_counter() - start)
    times = np.asarray(times) * 1e3
    return {
        "median_ms": float(np.median(times)),
        "mean_ms": float(times.mean()),
        "repeats": int(repeats),
    }


def interleaved_ms(runtimes, pixels, rounds=5, repeats=100, warmup=10):
    """{name: median over `rounds` of each round's median ms} for {name: runtime}, each
    with a `latency_ms(pixels, repeats=, warmup=)` -> a `latency_ms` dict
    (`runtime.Runtime`), timed in turn within every round so that a noisy machine
    slows them alike; comparisons between them hold within one call."""
    per_round = {name: [] for name in runtimes}
    for _ in range(rounds):
        for name, runtime in runtimes.items():
            result = runtime.latency_ms(pixels, repeats=repeats, warmup=warmup)
            per_round[name].append(result["median_ms"])
    return {name: float(np.median(times)) for name, times in per_round.items()}
