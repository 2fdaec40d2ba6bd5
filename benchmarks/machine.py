"""Which machine a benchmark ran on, for every JSON and table it writes.

The project's figures come from two kinds of 2-core CPU that differ up to 4x on
the same benchmark: an AMD EPYC (Zen 3: AVX2 and FMA only; no AVX-512, VNNI,
bf16 or AMX), where every figure committed before 2026-12-01 was measured, and
an Intel Xeon (Sapphire Rapids: AVX-512, AVX-512-BF16, AVX-512-VNNI, AMX). A
figure without its CPU, core count and load cannot be compared with another.

    from keras_vit_benchmarks.machine import describe, machine_info
    report["machine"] = machine_info()
    print(describe(report["machine"]))

Stdlib only; never imports TensorFlow, Keras, JAX or torch (their versions are
recorded when the benchmark has already imported them).
"""

import datetime
import os
import platform
import sys

# /proc/cpuinfo flag names worth recording (matmul, int8 and bf16 speed).
INSTRUCTION_SETS = (
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "avx_vnni",
    "amx_bf16",
    "amx_int8",
    "amx_tile",
    "avx512_fp16",
)
FRAMEWORKS = ("tensorflow", "keras", "jax", "torch")


def _cpuinfo():
    """{field: value} of the first processor in /proc/cpuinfo ({} off Linux)."""
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    if fields:
                        break
                    continue
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def machine_info():
    """A JSON-able dict: CPU model, vendor, CPU counts, instruction sets, load, date,
    Python and the versions of the frameworks already imported."""
    cpu = _cpuinfo()
    flags = set(cpu.get("flags", "").split())
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    info = {
        "cpu_model": cpu.get("model name") or platform.processor() or platform.machine(),
        "cpu_vendor": cpu.get("vendor_id") or None,
        "logical_cpus": os.cpu_count(),
        "usable_cpus": usable,
        "instruction_sets": sorted(name for name in INSTRUCTION_SETS if name in flags),
        "load_average": load,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
    }
    for name in FRAMEWORKS:
        module = sys.modules.get(name)
        if module is not None:
            info[name] = getattr(module, "__version__", "?")
    return info


def describe(info=None):
    """One line, e.g. 'Intel(R) Xeon(R) Processor, 2 CPUs, AVX2 AVX-512 AVX-512-BF16
    AMX, load 1.2'."""
    info = info or machine_info()
    sets = set(info.get("instruction_sets") or ())
    names = [
        label
        for flag, label in (
            ("avx2", "AVX2"),
            ("avx512f", "AVX-512"),
            ("avx512_bf16", "AVX-512-BF16"),
            ("avx512_vnni", "AVX-512-VNNI"),
        )
        if flag in sets
    ]
    if sets & {"amx_bf16", "amx_int8", "amx_tile"}:
        names.append("AMX")
    if "avx2" in sets and "avx512f" not in sets:
        names.append("(no AVX-512)")
    cpus = info.get("usable_cpus") or info.get("logical_cpus")
    line = f"{info.get('cpu_model', '?')}, {cpus} CPUs, {' '.join(names) or 'no AVX2'}"
    load = info.get("load_average")
    if load:
        line += f", load {load[0]:.1f}"
    return line
