"""Which machine a benchmark ran on, for every JSON and table it writes.

The project's figures come from several kinds of 2-core CPU that differ up to 4x
on the same benchmark, and that /proc/cpuinfo's model name alone ("AMD EPYC") does
not tell apart: AMD EPYC Zen (family 23, model 1: AVX2 and FMA only, the slowest),
Zen 3 (family 25, AVX2 and FMA only), Zen 4 (family 25,
models 0x10-0x1f and 0xa0-0xaf: AVX-512, AVX-512-BF16, no AMX), family 26 (Zen 5:
AVX-512, AVX-512-BF16, no AMX), and Intel Xeon Sapphire Rapids (family 6, model
143: AVX-512, AVX-512-BF16, AVX-512-VNNI, AMX). `machine_info` records the family,
model and stepping and names the kind (`cpu_kind`). A figure without its CPU kind,
core count and load cannot be compared with another.

    from keras_vit_cli.machine import describe, machine_info
    report["machine"] = machine_info()
    print(describe(report["machine"]))

Stdlib only; never imports TensorFlow, Keras, JAX or torch (their versions are
recorded when the benchmark has already imported them).
"""

import datetime
import json
import os
import platform
import subprocess
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


def cpu_kind(vendor, family, model):
    """The microarchitecture of (vendor_id, cpu family, model) as /proc/cpuinfo gives
    them, for the kinds the project runs on; else 'VENDOR family F model M'."""
    try:
        family, model = int(family), int(model)
    except (TypeError, ValueError):
        return None
    if vendor == "AuthenticAMD" and family == 23:  # Zen / Zen+ below model 0x30, else Zen 2
        return "AMD Zen 2" if model >= 0x30 else "AMD Zen"
    if vendor == "AuthenticAMD" and family == 25:
        zen4 = 0x10 <= model <= 0x1F or 0x60 <= model <= 0x7F or 0xA0 <= model <= 0xAF
        return "AMD Zen 4" if zen4 else "AMD Zen 3"
    if vendor == "AuthenticAMD" and family == 26:
        return "AMD Zen 5"
    if vendor == "GenuineIntel" and family == 6 and model == 143:
        return "Intel Sapphire Rapids"
    if vendor == "GenuineIntel" and family == 6 and model == 207:
        return "Intel Emerald Rapids"
    return f"{vendor} family {family} model {model}"


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
        "cpu_family": cpu.get("cpu family"),
        "cpu_model_number": cpu.get("model"),
        "cpu_stepping": cpu.get("stepping"),
        "cpu_kind": cpu_kind(cpu.get("vendor_id"), cpu.get("cpu family"), cpu.get("model")),
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


def source_commit(root=None):
    """The measured code's commit (short hash, '+dirty' with uncommitted changes to
    tracked files), or None outside a git checkout; `root`: another checkout's."""
    root = root or os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
        )
    except OSError:
        return None
    if head.returncode:
        return None
    return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")


def describe(info=None):
    """One line, e.g. 'AMD EPYC (AMD Zen 4, family 25 model 17), 2 CPUs, AVX2 AVX-512
    AVX-512-BF16 AVX-512-VNNI, load 1.2'."""
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
    cpu = info.get("cpu_model", "?")
    if info.get("cpu_kind"):
        cpu += f" ({info['cpu_kind']}, family {info.get('cpu_family')} model "
        cpu += f"{info.get('cpu_model_number')})"
    line = f"{cpu}, {cpus} CPUs, {' '.join(names) or 'no AVX2'}"
    load = info.get("load_average")
    if load:
        line += f", load {load[0]:.1f}"
    return line


def report(result, output=None):
    """Prints the machine's line and `result` as JSON, and writes the JSON to `output`
    (its folder created) when given: the last step of a benchmark."""
    print(describe(result.get("machine")))
    text = json.dumps(result, indent=1)
    print(text)
    if output:
        folder = os.path.dirname(output)
        if folder:
            os.makedirs(folder, exist_ok=True)
        with open(output, "w") as f:
            f.write(text)
