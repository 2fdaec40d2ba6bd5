"""Images/s and TFLOP/s of keras_vit, keras-hub's ViT and timm's ViT, side by side.

All contenders run the same architecture, batch and dtype policy on synthetic
inputs, interleaved: every round times each of them in turn, in an order rotated
by one each round, so that a noisy, shared machine slows them alike and the
ratios within one run hold. A square matmul in the same dtype runs in the
rotation too: the device's practical peak.

    KERAS_BACKEND=tensorflow python benchmarks/speed.py --variant=ViT_B16 --batch=8 \
        --dtype=float32 --mode=inference --compile=default,graph --json=/tmp/speed.json

Backend: KERAS_BACKEND (tensorflow or jax). Libraries that are not installed
are skipped and recorded as such. FLOPs are analytic (benchmarks/speed_flops.py;
train step = 3 forwards). Prints a table; --json writes every round's timing.
Both name the machine (benchmarks/machine.py): CPU kinds differ up to 4x.
"""

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

from benchmarks import speed_flops, speed_models, speed_runners  # noqa: E402
from benchmarks.machine import describe, machine_info  # noqa: E402
from keras_vit.variants import VARIANTS  # noqa: E402

LIBRARIES = ("keras_vit", "keras_vit_explicit", "keras_vit_padded", "keras_hub", "timm", "matmul")
DEFAULT_LIBRARIES = "keras_vit,keras_hub,timm,matmul"


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
        "train_on_batch with jit_compile='auto'), xla, graph (TF only)",
    )
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
    """{label: runner} and {label: reason} for the libraries that could not run."""
    runners, skipped = {}, {}
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
                    runners[f"{library}[{compile_mode}]"] = speed_runners.KerasRunner(
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
    )


def measure(runners, args, forward_flops):
    """Interleaved timing. Returns {label: result dict}."""
    results = {}
    for label, runner in runners.items():  # compile + warm up, one at a time
        start = time.perf_counter()
        runner.step()
        first = time.perf_counter() - start
        for _ in range(args.warmup):
            runner.step()
        results[label] = {"first_step_s": first, "round_s": [], **runner.describe()}
        print(f"  ready {label}: first step {first:.1f} s", flush=True)
    labels = list(runners)
    for round_index in range(args.rounds):
        # Rotate the order each round: no contender always runs right after the
        # same neighbour (a run with timm slows the Keras contenders; cause not
        # found, docs/speed.md).
        shift = round_index % len(labels)
        for label in labels[shift:] + labels[:shift]:
            runner = runners[label]
            start = time.perf_counter()
            for _ in range(args.steps):
                runner.step()
            results[label]["round_s"].append((time.perf_counter() - start) / args.steps)
        print(f"  round {round_index + 1}/{args.rounds} done, load {_load()}", flush=True)
    for label, runner in runners.items():
        result = results[label]
        step_s = statistics.median(result["round_s"])
        flops = speed_runners.step_flops(runner, forward_flops, args.batch)
        result.update(step_s=step_s, tflops=flops / step_s / 1e12, step_flops=flops)
        if label != "matmul":
            result["images_per_s"] = args.batch / step_s
    _add_ratios(results)
    return results


def _add_ratios(results):
    peak = results.get("matmul", {}).get("tflops")
    reference = next(
        (r["images_per_s"] for label, r in results.items() if label.startswith("keras_vit[")), None
    )
    for label, result in results.items():
        if label == "matmul":
            continue
        if peak:
            result["fraction_of_matmul"] = result["tflops"] / peak
        if reference:
            result["relative_to_keras_vit"] = result["images_per_s"] / reference


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
    lines = [
        f"{'contender':28} {'images/s':>9} {'step s':>8} {'TFLOP/s':>8} "
        f"{'of matmul':>9} {'vs keras_vit':>12}"
    ]
    for label, r in results.items():
        images = f"{r['images_per_s']:9.2f}" if "images_per_s" in r else f"{'-':>9}"
        fraction = f"{r['fraction_of_matmul']:9.0%}" if "fraction_of_matmul" in r else f"{'-':>9}"
        relative = (
            f"{r['relative_to_keras_vit']:12.2f}" if "relative_to_keras_vit" in r else f"{'-':>12}"
        )
        lines.append(
            f"{label:28} {images} {r['step_s']:8.3f} {r['tflops']:8.3f} {fraction} {relative}"
        )
    lines += [f"{label:28} skipped: {reason}" for label, reason in skipped.items()]
    return "\n".join(lines)


def main(argv=None):
    args = parse_args(argv)
    keras.config.set_dtype_policy(args.dtype)
    arch = VARIANTS[args.variant]
    forward_flops = speed_flops.vit_forward_flops(
        args.image_size, num_classes=args.num_classes, **arch
    )
    images, labels = speed_runners.synthetic_batch(args.batch, args.image_size, args.num_classes)
    load_before = _load()
    machine = machine_info()
    print(describe(machine), flush=True)
    print(
        f"{args.variant} {args.image_size}px batch {args.batch} {args.dtype} {args.mode} "
        f"on {keras.backend.backend()}; {forward_flops / 1e9:.1f} GFLOP/image; "
        f"load {load_before}",
        flush=True,
    )
    runners, skipped = build_runners(args, arch, images, labels)
    results = measure(runners, args, forward_flops)
    report = {
        "args": vars(args),
        "environment": environment(),
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
