r"""The kernel's share of a training step: minor page faults, system time and images/s
of the trainers' own update, under each memory allocator, interleaved.

  python benchmarks/step_faults.py --config=fashion_mnist_hybrid [--steps=200] \
      [--warmup=20] [--repeats=2] [--variants=system,...] [--perf_dir=DIR] \
      [--output_json=FILE] [--config.KEY=VALUE ...]

Each run is a program of its own (the allocator is chosen before TensorFlow loads): it
builds the update as the demo's calibration does (tools/demo_budget.trainer_step: the
config's model, optimizer, loss, precision and XLA choice, one synthetic batch),
compiles it, runs WARMUP_STEPS, then counts over --steps updates, with getrusage
(every thread of the process): minor page faults per step, user and system CPU
seconds, the system share of the CPU time, and images/s. Variants run in turn, then
again (--repeats): a slow spell of the machine hits all of them.

Variants (the environment each run starts with):
  system     glibc's malloc, as the trainers run
  bfc        TensorFlow's BFC allocator for its CPU tensors (TF_CPU_ALLOCATOR_USE_BFC)
  tcmalloc   gperftools' tcmalloc (Debian's libtcmalloc-minimal4) preloaded
  jemalloc   jemalloc (Debian's libjemalloc2) preloaded
--perf_dir=DIR attaches perf to each run's timed steps (perf must be installed and
allowed: `perf stat -e page-faults true`): the counts of the memory system calls (mmap,
munmap, madvise, brk, mprotect, from their tracepoints) and, sampled on every page
fault, the library and function whose memory access faulted (`perf report --sort
dso,sym`, those over 2%). --warmup=N untimed steps after the compiling one (default
WARMUP_STEPS; fewer for a large model).
Prints a table and writes JSON naming the machine (cli/machine.py). Measurements, not
pass/fail: run one at a time on a quiet machine.
"""

import json
import os
import resource
import subprocess
import sys
import time

from keras_vit_cli import commands
from keras_vit_cli.machine import describe, machine_info, source_commit
from keras_vit_tools.demo import _opt

WARMUP_STEPS = 20
STEPS_PER_CALL = 10
LIBDIR = "/usr/lib/x86_64-linux-gnu"
VARIANTS = {
    "system": {},
    "bfc": {"TF_CPU_ALLOCATOR_USE_BFC": "true"},
    "tcmalloc": {"LD_PRELOAD": f"{LIBDIR}/libtcmalloc_minimal.so.4"},
    "jemalloc": {"LD_PRELOAD": f"{LIBDIR}/libjemalloc.so.2"},
}


def child(config_path, steps, warmup, perf, config_flags):
    """One run in this process: {faults_per_step, user_s, system_s, system_share,
    images_per_second}."""
    from keras_vit_cli import console

    console.setup()
    from absl import flags
    from ml_collections import config_flags as cf

    from keras_vit_tools import demo_budget

    holder = cf.DEFINE_config_file("config", None, "config")
    flags.FLAGS([sys.argv[0], f"--config={config_path}", *config_flags])
    config = holder.value
    overrides = cf.get_override_values(flags.FLAGS["config"])
    batch = int(overrides.get("batch_size", config.batch_size))
    step = demo_budget.trainer_step(config, batch, overrides)()
    step(warmup)  # compiles, then settles
    watchers = _watch(perf) if perf else None
    before, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    per_call = min(STEPS_PER_CALL, steps)
    for _ in range(steps // per_call):
        step(per_call)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF)
    where = _unwatch(watchers, perf) if perf else {}
    n = steps // per_call * per_call
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    return {
        "faults_per_step": (after.ru_minflt - before.ru_minflt) / n,
        "major_faults": after.ru_majflt - before.ru_majflt,
        "user_s": user,
        "system_s": system,
        "system_share": system / (user + system),
        "images_per_second": n * batch / wall,
        "max_rss_mb": after.ru_maxrss / 1024,
        **where,
    }


# With --perf: what the kernel did for the timed steps, from perf attached to the run's
# own process: the memory system calls (their tracepoints) and, sampled on the
# page-fault event, the code (library and function) whose memory accesses faulted.
PERF_SYSCALLS = ("mmap", "munmap", "madvise", "brk", "mprotect")


def _watch(prefix):
    pid = str(os.getpid())
    events = ",".join(f"syscalls:sys_enter_{c}" for c in PERF_SYSCALLS)
    stat = ["perf", "stat", "-x,", "-e", f"page-faults,{events}", "-p", pid]
    record = ["perf", "record", "-q", "-e", "page-faults", "-c", "1", "-p", pid]
    procs = [
        subprocess.Popen([*stat, "-o", f"{prefix}.stat"]),
        subprocess.Popen([*record, "-o", f"{prefix}.data"]),
    ]
    time.sleep(1.0)  # perf attaches
    return procs


def _unwatch(procs, prefix):
    import signal

    for p in procs:
        p.send_signal(signal.SIGINT)
        p.wait()
    counts = {}
    with open(f"{prefix}.stat") as f:
        for line in f:
            parts = line.strip().split(",")
            if len(parts) > 2 and parts[0].replace(".", "").isdigit():
                counts[parts[2].replace("syscalls:sys_enter_", "")] = float(parts[0])
    report = subprocess.run(
        ["perf", "report", "-i", f"{prefix}.data", "--stdio", "--sort", "dso,sym"]
        + ["--percent-limit", "2", "-g", "none"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ).stdout
    top = [line.strip() for line in report.splitlines() if "%" in line and not line.startswith("#")]
    return {"perf_counts": counts, "faults_where": top[:15]}


def main(argv):
    argv = list(argv)
    if _opt(argv, "child", None):
        config = _opt(argv, "config", None)
        steps = int(_opt(argv, "steps", "200"))
        warmup = int(_opt(argv, "warmup", str(WARMUP_STEPS)))
        perf = _opt(argv, "perf", None)
        print(json.dumps(child(config, steps, warmup, perf, argv)), flush=True)
        return
    import keras_vit_configs

    config = keras_vit_configs.find(_opt(argv, "config", "fashion_mnist_hybrid"))
    steps = int(_opt(argv, "steps", "200"))
    warmup = int(_opt(argv, "warmup", str(WARMUP_STEPS)))
    perf_dir = _opt(argv, "perf_dir", None)
    repeats = int(_opt(argv, "repeats", "2"))
    variants = _opt(argv, "variants", ",".join(VARIANTS)).split(",")
    output = _opt(argv, "output_json", None)
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown or any(not a.startswith("--config.") for a in argv):
        sys.exit(f"error: unknown variants {unknown} or flags {argv}; known: {list(VARIANTS)}")
    results = {
        "config": os.path.relpath(config, commands.ROOT),
        "config_flags": argv,
        "steps": steps,
        "commit": source_commit(),
        "machine": machine_info(),
        "runs": {v: [] for v in variants},
    }
    for repeat in range(repeats):
        for variant in variants:
            env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD",)}
            env.update(VARIANTS[variant])
            cmd = [sys.executable, os.path.abspath(__file__), "--child=1"]
            cmd += [f"--config={config}", f"--steps={steps}", f"--warmup={warmup}", *argv]
            if perf_dir:
                os.makedirs(perf_dir, exist_ok=True)
                cmd.append(f"--perf={os.path.join(perf_dir, f'{variant}_r{repeat}')}")
            out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, text=True, check=True)
            run = json.loads(out.stdout.strip().splitlines()[-1])
            results["runs"][variant].append(run)
            print(
                f"{variant:9s} r{repeat}: {run['faults_per_step']:8.0f} faults/step, "
                f"system {100 * run['system_share']:4.1f}% of CPU time, "
                f"{run['images_per_second']:7.1f} images/s, max RSS {run['max_rss_mb']:.0f} MB",
                flush=True,
            )
            for line in run.get("faults_where", ()):
                print(f"    {line}", flush=True)
            if run.get("perf_counts"):
                print(f"    {run['perf_counts']}", flush=True)
    print(describe(results["machine"]))
    if output:
        with open(output, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
