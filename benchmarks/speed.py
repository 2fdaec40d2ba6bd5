"""Images/s and TFLOP/s of keras_vit, keras-hub's ViT and timm's ViT, side by side.

All contenders run the same architecture, batch and dtype policy on synthetic
inputs, interleaved: every round times each of them in turn, in an order rotated
by one each round, so that a noisy, shared machine slows them alike and the
ratios within one run hold. A square matmul in the same dtype runs in the
rotation too: the device's practical peak.

    KERAS_BACKEND=tensorflow python benchmarks/speed.py --variant=ViT_B16 --batch=8 \
        --dtype=float32 --mode=inference --compile=default,graph --json=/tmp/speed.json

Backend: KERAS_BACKEND (tensorflow, jax or torch); or --backends=tensorflow,jax,torch
times the Keras contenders on each of them in one run: the backend is fixed per process,
so each gets a worker process (and timm one of its own), and the parent interleaves the
workers round by round as above, one worker at a time. Libraries and compile modes that
cannot run (not installed; `xla` under torch) are skipped and recorded as such. FLOPs are
analytic (benchmarks/speed_flops.py; train step = 3 forwards). Prints a table; --json
writes every round's timing. Both name the machine (cli/machine.py): CPU kinds
differ up to 4x.

    python benchmarks/speed.py --backends=tensorflow,jax,torch --variant=ViT_Ti16 --batch=2 \
        --compile=default,xla,torch_compile --libraries=keras_vit,matmul
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time

import keras  # noqa: E402

from keras_vit.variants import VARIANTS  # noqa: E402
from keras_vit_benchmarks import speed_flops, speed_models, speed_runners  # noqa: E402
from keras_vit_cli.machine import describe, machine_info  # noqa: E402

LIBRARIES = (
    "keras_vit",
    "keras_vit_explicit",
    "keras_vit_padded",
    "keras_vit_erf",
    "keras_hub",
    "timm",
    "matmul",
)
DEFAULT_LIBRARIES = "keras_vit,keras_hub,timm,matmul"
BACKENDS = ("tensorflow", "jax", "torch")
# With --backends: timm (PyTorch whatever the Keras backend) runs once, in its own worker,
# whose Keras backend is torch so that it loads no TensorFlow.
TIMM_WORKER = "timm"
# A worker's protocol lines on its stdout (any other line is its log, passed on).
MESSAGE = "@@speed "


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--variant", default="ViT_B16", choices=sorted(VARIANTS))
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--num_classes", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--mode", default="inference", choices=("inference", "train"))
    parser.add_argument(
        "--compile",
        default="default",
        help="comma list of Keras compile modes: default (model.predict / "
        "train_on_batch with jit_compile='auto'), xla (TF, JAX), graph (TF only), "
        "torch_compile (torch); a mode a backend lacks is skipped there",
    )
    parser.add_argument(
        "--backends",
        help=f"comma list from {', '.join(BACKENDS)}: time the Keras contenders on each, "
        "one worker process per backend, interleaved (default: KERAS_BACKEND only)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--libraries", default=DEFAULT_LIBRARIES, help=f"comma list from {', '.join(LIBRARIES)}"
    )
    parser.add_argument("--timm_compile", action="store_true", help="torch.compile timm")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=2, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps after the first")
    parser.add_argument("--matmul_n", type=int, default=2048)
    parser.add_argument(
        "--pad_tokens_to_multiple",
        type=int,
        default=64,
        help="keras_vit_padded: pad the tokens of the fused attention to a "
        "multiple of this, padding keys masked",
    )
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    args.compile = _comma_list(args.compile, speed_runners.COMPILE_MODES, "--compile")
    args.libraries = _comma_list(args.libraries, LIBRARIES, "--libraries")
    if args.backends is not None:
        args.backends = _comma_list(args.backends, BACKENDS, "--backends")
        if len(set(args.backends)) < len(args.backends):
            parser.error(f"--backends names a backend twice: {args.backends}.")
    backends = args.backends or [keras.backend.backend()]
    runnable = [
        mode
        for mode in args.compile
        for backend in backends
        if not speed_runners.compile_mode_error(mode, backend)
    ]
    if set(args.libraries) - {"timm", "matmul"} and not runnable and not args.worker:
        parser.error(f"--compile {args.compile}: none of them runs on {', '.join(backends)}.")
    if min(args.batch, args.rounds, args.steps, args.pad_tokens_to_multiple) < 1 or args.warmup < 0:
        parser.error(
            "--batch, --rounds, --steps and --pad_tokens_to_multiple must be >= 1, --warmup >= 0."
        )
    return args


def _comma_list(text, allowed, flag):
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        raise SystemExit(f"{flag}: unknown or empty {unknown or text!r}; choose from {allowed}.")
    return items


def build_runners(args, arch, images, labels):
    """{label: runner} and {label: reason} for the libraries (and compile modes) that
    could not run."""
    runners, skipped = {}, {}
    backend = keras.backend.backend()
    for library in args.libraries:
        try:
            if library == "matmul":
                compute = "bfloat16" if args.dtype == "mixed_bfloat16" else "float32"
                runners["matmul"] = speed_runners.MatmulRunner(args.matmul_n, compute)
            elif library == "timm":
                runners["timm"] = speed_runners.TimmRunner(
                    arch,
                    args.image_size,
                    args.num_classes,
                    images,
                    labels,
                    args.mode,
                    args.dtype,
                    compile_model=args.timm_compile,
                )
            else:
                for compile_mode in args.compile:
                    label = f"{library}[{compile_mode}]"
                    error = speed_runners.compile_mode_error(compile_mode, backend)
                    if error:
                        skipped[label] = error
                        continue
                    runners[label] = speed_runners.KerasRunner(
                        _keras_model(library, arch, args), images, labels, args.mode, compile_mode
                    )
        except ImportError as error:
            skipped[library] = f"not installed: {error}"
    return runners, skipped


def _keras_model(library, arch, args):
    if library == "keras_hub":
        return speed_models.keras_hub_model(arch, args.image_size, args.num_classes)
    return speed_models.keras_vit_model(
        arch,
        args.image_size,
        args.num_classes,
        fused_attention=library != "keras_vit_explicit",
        pad_tokens_to_multiple=(
            args.pad_tokens_to_multiple if library == "keras_vit_padded" else None
        ),
        approximate_gelu=library != "keras_vit_erf",
    )


def measure(runners, args, forward_flops):
    """Interleaved timing. Returns {label: result dict}."""
    results = warm_up(runners, args, forward_flops)
    for round_index in range(args.rounds):
        for label, seconds in time_round(runners, args, round_index).items():
            results[label]["round_s"].append(seconds)
        print(f"  round {round_index + 1}/{args.rounds} done, load {_load()}", flush=True)
    summarise(results, args.batch)
    return results


def warm_up(runners, args, forward_flops):
    """Compiles and warms up each runner, one at a time. Returns {label: result dict}
    with the first step's time, the FLOPs of a step and an empty `round_s`."""
    results = {}
    for label, runner in runners.items():
        start = time.perf_counter()
        runner.step()
        first = time.perf_counter() - start
        for _ in range(args.warmup):
            runner.step()
        results[label] = {
            "library": label.split("[")[0],
            "backend": keras.backend.backend(),
            "first_step_s": first,
            "round_s": [],
            "step_flops": speed_runners.step_flops(runner, forward_flops, args.batch),
            **runner.describe(),
        }
        print(f"  ready {label}: first step {first:.1f} s", flush=True)
    return results


def time_round(runners, args, round_index):
    """One round: `args.steps` steps of each runner in turn. Returns {label: s/step}."""
    # Rotate the order each round: no contender always runs right after the
    # same neighbour (a run with timm slows the Keras contenders; cause not
    # found, docs/speed.md).
    labels = _rotated(list(runners), round_index)
    seconds = {}
    for label in labels:
        runner = runners[label]
        start = time.perf_counter()
        for _ in range(args.steps):
            runner.step()
        seconds[label] = (time.perf_counter() - start) / args.steps
    return seconds


def _rotated(items, round_index):
    shift = round_index % len(items) if items else 0
    return items[shift:] + items[:shift]


def summarise(results, batch):
    """Adds the median step time, TFLOP/s, images/s and the ratios to each result."""
    for result in results.values():
        step_s = statistics.median(result["round_s"])
        result.update(step_s=step_s, tflops=result["step_flops"] / step_s / 1e12)
        if result["library"] != "matmul":
            result["images_per_s"] = batch / step_s
    _add_ratios(results)


def _add_ratios(results):
    """fraction_of_matmul: against the matmul of the same backend (timm's: its
    process's); relative_to_keras_vit: against the first keras_vit contender."""
    peaks = {r["backend"]: r["tflops"] for r in results.values() if r["library"] == "matmul"}
    reference = next(
        (r["images_per_s"] for r in results.values() if r["library"] == "keras_vit"), None
    )
    for result in results.values():
        if result["library"] == "matmul":
            continue
        if peaks.get(result["backend"]):
            result["fraction_of_matmul"] = result["tflops"] / peaks[result["backend"]]
        if reference:
            result["relative_to_keras_vit"] = result["images_per_s"] / reference


# -- --backends: one worker process per backend ----------------------------------------


def worker_plan(args):
    """[(worker name, KERAS_BACKEND, libraries)] for --backends: the Keras contenders
    and the matmul on each backend, and timm (if asked for) in a worker of its own."""
    keras_libraries = [library for library in args.libraries if library != "timm"]
    plan = [(backend, backend, keras_libraries) for backend in args.backends if keras_libraries]
    if "timm" in args.libraries:
        plan.append((TIMM_WORKER, "torch", ["timm"]))
    return plan


def worker_argv(args, libraries):
    """The command line of a worker: this run's settings, its libraries, no --json."""
    argv = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        f"--variant={args.variant}",
        f"--image_size={args.image_size}",
        f"--num_classes={args.num_classes}",
        f"--batch={args.batch}",
        f"--dtype={args.dtype}",
        f"--mode={args.mode}",
        f"--compile={','.join(args.compile)}",
        f"--libraries={','.join(libraries)}",
        f"--steps={args.steps}",
        f"--warmup={args.warmup}",
        f"--matmul_n={args.matmul_n}",
        f"--pad_tokens_to_multiple={args.pad_tokens_to_multiple}",
    ]
    return argv + (["--timm_compile"] if args.timm_compile else [])


def _send(message):
    print(MESSAGE + json.dumps(message), flush=True)


def serve(args, arch, images, labels, forward_flops):
    """A worker: builds and warms up its runners, reports them, then times one round
    per 'round <index>' line on stdin, until any other line or the end of stdin."""
    runners, skipped = build_runners(args, arch, images, labels)
    results = warm_up(runners, args, forward_flops)
    _send({"results": results, "skipped": skipped, "environment": environment()})
    for line in sys.stdin:
        command = line.split()
        if command[:1] != ["round"]:
            break
        _send({"round_s": time_round(runners, args, int(command[1]))})


class Worker:
    """The parent's handle on one worker process."""

    def __init__(self, name, backend, argv):
        self.name = name
        env = dict(os.environ, KERAS_BACKEND=backend)
        self.process = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
        )

    def receive(self):
        """The next message; the worker's other lines are printed, tagged with its
        name. None if it exited first."""
        for line in self.process.stdout:
            if line.startswith(MESSAGE):
                return json.loads(line[len(MESSAGE) :])
            print(f"[{self.name}] {line}", end="", flush=True)
        return None

    def request(self, line):
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        return self.receive()

    def close(self):
        try:
            self.process.stdin.close()  # ends `serve`'s loop
        except BrokenPipeError:  # it has exited already
            pass
        for line in self.process.stdout:
            print(f"[{self.name}] {line}", end="", flush=True)
        return self.process.wait()


def measure_backends(args):
    """--backends: starts the workers one after another (each compiles and warms up
    alone), then times rounds, rotating the order of the workers each round as
    `time_round` rotates the contenders within one. Returns (results, skipped,
    environments), labels prefixed with the worker's name ('jax/keras_vit[xla]')."""
    workers, results, skipped, environments = [], {}, {}, {}
    for name, backend, libraries in worker_plan(args):
        print(f"starting the {name} worker (KERAS_BACKEND={backend})", flush=True)
        worker = Worker(name, backend, worker_argv(args, libraries))
        ready = worker.receive()
        if ready is None:
            skipped[name] = f"worker exited with code {worker.close()} (its log above)"
            continue
        environments[name] = ready["environment"]
        if ready["results"]:
            workers.append(worker)
        else:  # nothing to time there (all skipped)
            worker.close()
        results.update({f"{name}/{label}": r for label, r in ready["results"].items()})
        skipped.update({f"{name}/{label}": why for label, why in ready["skipped"].items()})
    try:
        for round_index in range(args.rounds):
            for worker in _rotated(workers, round_index):
                reply = worker.request(f"round {round_index}")
                if reply is None:
                    raise RuntimeError(
                        f"the {worker.name} worker exited during round {round_index}"
                    )
                for label, seconds in reply["round_s"].items():
                    results[f"{worker.name}/{label}"]["round_s"].append(seconds)
            print(f"  round {round_index + 1}/{args.rounds} done, load {_load()}", flush=True)
    finally:
        for worker in workers:
            worker.close()
    summarise(results, args.batch)
    return results, skipped, environments


def _load():
    return "%.2f %.2f %.2f" % os.getloadavg()


def environment():
    versions = {"python": platform.python_version(), "keras": keras.__version__}
    for module in ("tensorflow", "jax", "torch", "timm", "keras_hub"):
        loaded = sys.modules.get(module)
        if loaded is not None:
            versions[module] = getattr(loaded, "__version__", "?")
    return {
        "backend": keras.backend.backend(),
        "machine": platform.machine(),
        "processor": _cpu_name(),
        "cpus": os.cpu_count(),
        "versions": versions,
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
    }


def _cpu_name():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def format_table(results, skipped):
    width = max([28, *map(len, results), *map(len, skipped)])
    lines = [
        f"{'contender':{width}} {'images/s':>9} {'step s':>8} {'TFLOP/s':>8} "
        f"{'of matmul':>9} {'vs keras_vit':>12}"
    ]
    for label, r in results.items():
        images = f"{r['images_per_s']:9.2f}" if "images_per_s" in r else f"{'-':>9}"
        fraction = f"{r['fraction_of_matmul']:9.0%}" if "fraction_of_matmul" in r else f"{'-':>9}"
        relative = (
            f"{r['relative_to_keras_vit']:12.2f}" if "relative_to_keras_vit" in r else f"{'-':>12}"
        )
        lines.append(
            f"{label:{width}} {images} {r['step_s']:8.3f} {r['tflops']:8.3f} {fraction} {relative}"
        )
    lines += [f"{label:{width}} skipped: {reason}" for label, reason in skipped.items()]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    keras.config.set_dtype_policy(args.dtype)
    arch = VARIANTS[args.variant]
    forward_flops = speed_flops.vit_forward_flops(
        args.image_size, num_classes=args.num_classes, **arch
    )
    images, labels = speed_runners.synthetic_batch(args.batch, args.image_size, args.num_classes)
    if args.worker:
        serve(args, arch, images, labels, forward_flops)
        return None
    load_before = _load()
    machine = machine_info()
    print(describe(machine), flush=True)
    print(
        f"{args.variant} {args.image_size}px batch {args.batch} {args.dtype} {args.mode} "
        f"on {', '.join(args.backends or [keras.backend.backend()])}; "
        f"{forward_flops / 1e9:.1f} GFLOP/image; load {load_before}",
        flush=True,
    )
    if args.backends:
        results, skipped, environments = measure_backends(args)
    else:
        runners, skipped = build_runners(args, arch, images, labels)
        results = measure(runners, args, forward_flops)
        environments = environment()
    report = {
        "args": vars(args),
        # One environment; with --backends, {worker name: its environment}.
        "environment": environments,
        "machine": machine,
        "forward_gflops_per_image": forward_flops / 1e9,
        "load_before": load_before,
        "load_after": _load(),
        "results": results,
        "skipped": skipped,
    }
    print(describe(machine))
    print(format_table(results, skipped))
    print(f"load before {load_before}, after {report['load_after']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
    return report


if __name__ == "__main__":
    main()
