r"""Every CPU serving path of a keras_vit model in one run: latency at batch 1
(median and p99 ms) and throughput at batch 8 (images/s), interleaved, with each
path's top-1 agreement and largest probability difference against the float32
Keras model.

  python benchmarks/serving_cpu.py [--models=vit_b16,hybrid] [--rounds=5] \
      [--json=benchmarks/results/serving_cpu_zen4.json] [--chart=docs/images/serving_cpu_zen4.png]
  python benchmarks/serving_cpu.py --vit_variant=ViT_Ti16 --image_size=32 --rounds=1 \
      --repeats=2 --steps=1 --num_images=20 --hybrid_train_steps=5   # a tiny try

Models: 'vit_b16', --vit_variant (ViT-B/16) at --image_size (224), 1000 classes,
random weights with a random head (benchmarks/onnx.py `randomize_head`: predictions
that depend on the image), on Fashion-MNIST test images resized; 'hybrid', the
demo's model (configs/fashion_mnist_hybrid.py, 28 px, 10 classes): --hybrid_run_dir
if given (a `make demo` run), else trained here for --hybrid_train_steps AdamW steps
(a proxy of the trained model: accuracies mean something, not the demo's 90.7%).

Paths (`PATHS`): the Keras model by its default path (the tf.function Keras'
predict runs, XLA where the model asks for it); the SavedModel's
predict_images_float32 signature in TensorFlow; TFLite float32 / float16 / int8
(full integer, calibrated; XNNPACK, --threads; the files take one image, so batch 8
is 8 invokes); ONNX Runtime float32 and int8 (its dynamic quantisation of the
float32 file: deploy/onnx_export.py's, tools/export_onnx.py --precision=int8_dynamic);
OpenVINO float32, bfloat16 (on a CPU with AVX-512-BF16 or AMX) and
int8 (nncf's post-training quantisation), compiled at batch 1 and at batch 8;
timm float32 and bfloat16 autocast (torch, eager) as the peer, ViT only, its own
random weights (its agreement is against its own float32). A path that cannot
run here is recorded with the reason, not dropped.

Timing: the paths are built and warmed up one at a time; then each of --rounds
rounds runs every path in turn, in an order rotated by one each round (as
benchmarks/speed.py), --repeats batch-1 calls and --steps batch-8 calls each, so
that a shared machine slows them alike. Batch 1: median and p99 over all timed
calls; batch 8: 8 / median seconds per call. `uptime` is recorded before and after
(the machine may be shared). A measurement, not a test.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
# `python benchmarks/serving_cpu.py` puts benchmarks/ first on sys.path, where
# benchmarks/onnx.py would shadow the onnx package itself.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != HERE]
os.environ["KERAS_BACKEND"] = "tensorflow"
# OpenMP threads that sleep when idle instead of spinning (torch's, for timm): on the
# shared 2-core machine, with other work running, spinning threads made timm's ViT-Ti/16
# at batch 1 take 0.5-2.1 s against 0.1 s passive. Set before torch loads; recorded.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
from keras_vit_cli import console

if __name__ == "__main__":
    console.setup()  # before TensorFlow is imported: no library noise in the table

import json

import keras
import numpy as np
import tensorflow as tf

import keras_vit
from keras_vit.variants import VARIANTS
from keras_vit_benchmarks import speed_runners
from keras_vit_benchmarks.onnx import randomize_head
from keras_vit_cli import machine
from keras_vit_configs import fashion_mnist_hybrid
from keras_vit_data import fashion_mnist as fashion_mnist_data
from keras_vit_deploy import (
    datasets,
    keras_runtime,
    onnx_export,
    onnx_runtime,
    openvino_export,
    openvino_runtime,
    report,
    serving,
    tflite,
    tflite_runtime,
)

PATHS = (
    "keras",
    "saved_model",
    "tflite_float32",
    "tflite_float16",
    "tflite_int8",
    "onnx_float32",
    "onnx_int8_dynamic",
    "openvino_float32",
    "openvino_bfloat16",
    "openvino_int8",
    "timm_float32",
    "timm_bfloat16",
)
MODELS = ("vit_b16", "hybrid")
BATCH = 8
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
VERSIONED = (
    "keras",
    "tensorflow-cpu",
    "ai-edge-litert",
    "tf2onnx",
    "onnxruntime",
    "openvino",
    "nncf",
    "torch",
    "timm",
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--paths", default=",".join(PATHS))
    parser.add_argument("--vit_variant", default="ViT_B16")
    parser.add_argument("--image_size", type=int, default=224, help="the ViT's")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=10, help="batch-1 calls per round")
    parser.add_argument("--steps", type=int, default=2, help="batch-8 calls per round")
    parser.add_argument("--num_images", type=int, default=100, help="agreement images, ViT")
    parser.add_argument("--hybrid_images", type=int, default=1000, help="agreement images")
    parser.add_argument("--calibration_images", type=int, default=32, help="int8 calibration")
    parser.add_argument("--hybrid_run_dir", help="a trained run of the demo's hybrid")
    parser.add_argument("--hybrid_train_steps", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count(), help="TFLite threads")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--chart", help="write the bar chart (PNG) here")
    args = parser.parse_args(argv)
    args.models = _comma_list(args.models, MODELS, "--models", parser)
    args.paths = _comma_list(args.paths, PATHS, "--paths", parser)
    if min(args.rounds, args.repeats, args.steps, args.num_images, args.hybrid_images) < 1:
        parser.error("--rounds, --repeats, --steps and the image counts must be >= 1.")
    return args


def _comma_list(text, allowed, flag, parser):
    items = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [item for item in items if item not in allowed]
    if unknown or not items:
        parser.error(f"{flag}: unknown or empty {unknown or text!r}; choose from {allowed}.")
    return items


class Skip(Exception):
    """A path that cannot run on this machine; the message says why."""


class ServingPath:
    """One way of serving the model: `predict(pixels)` -> probabilities (N, K) for
    the agreement, `call_1(image)` and `call_8(batch)` the timed calls on float32
    pixels, `facts` what the JSON says of it."""

    def __init__(self, predict, call_1, call_8, **facts):
        self.predict, self.call_1, self.call_8, self.facts = predict, call_1, call_8, facts


def _softmax(values):
    return tf.nn.softmax(np.asarray(values, np.float32), axis=-1).numpy()


def build_keras(model, work):
    runtime = keras_runtime.KerasClassifier(model)
    return ServingPath(
        runtime.predict,
        lambda x: runtime.forward(tf.constant(x)).numpy(),
        lambda x: runtime.forward(tf.constant(x)).numpy(),
        runtime="keras (tf.function, Keras' predict path)",
        jit_compile=bool(model.jit_compile),
    )


def build_saved_model(model, work):
    directory = os.path.join(work["dir"], "saved_model")
    serving.export_saved_model(model, directory)
    loaded = tf.saved_model.load(directory)
    served = serving.loaded_signatures(loaded)
    signature = loaded.signatures[served.images_float32]
    work["loaded"] = loaded  # keeps the signature's variables alive

    def call(x):
        return signature(images=tf.constant(x))[served.output].numpy()

    return ServingPath(
        report.saved_model_reference(loaded),
        call,
        call,
        runtime=f"TensorFlow {tf.__version__}, signature {served.images_float32}",
    )


def build_tflite(quantization):
    def build(model, work):
        content = tflite.convert_keras_model(model, quantization, work["calibration"])
        runtime = tflite_runtime.TFLiteClassifier(content, num_threads=work["threads"])
        return ServingPath(
            runtime.predict,
            runtime.predict,
            runtime.predict,  # the file takes one image: 8 invokes
            runtime=f"{tflite_runtime.INTERPRETER} (XNNPACK), {work['threads']} threads",
            quantization=quantization,
            file_bytes=len(content),
            batch_8="8 invokes of the batch-1 file",
        )

    return build


def _onnx_float32(model, work):
    path = os.path.join(work["dir"], "model.onnx")
    if not os.path.exists(path):
        onnx_export.export_keras_model(model, path, "float32", dynamic_batch=True)
    return path


def _onnx_path(path, **facts):
    runtime = onnx_runtime.ONNXClassifier(path)
    feed = runtime.input["name"]

    def call(x):
        return runtime.session.run([runtime.output_name], {feed: x})[0]

    return ServingPath(
        runtime.predict,
        call,
        call,
        runtime="onnxruntime (CPU provider)",
        file_bytes=os.path.getsize(path),
        **facts,
    )


def build_onnx_float32(model, work):
    return _onnx_path(_onnx_float32(model, work), precision="float32")


def build_onnx_int8_dynamic(model, work):
    path = os.path.join(work["dir"], "model_int8.onnx")
    onnx_export.quantize_int8_dynamic(_onnx_float32(model, work), path)
    return _onnx_path(path, precision="int8 weights, activations quantised per call")


def _has_bfloat16():
    return bool(set(machine.machine_info()["instruction_sets"]) & set(BF16_FLAGS))


def build_openvino(precision):
    def build(model, work):
        if precision == "bfloat16" and not _has_bfloat16():
            raise Skip("the CPU has neither AVX-512-BF16 nor AMX: OpenVINO would compute float32")
        path = os.path.join(work["dir"], f"openvino_{precision}.xml")
        openvino_export.export_keras_model(model, path, precision, work["calibration"])
        single = openvino_runtime.OpenVINOClassifier(path, batch_size=1)
        batched = openvino_runtime.OpenVINOClassifier(path, batch_size=BATCH)
        computed = single.inference_precision()
        if precision == "bfloat16" and computed != "bfloat16":
            raise Skip(f"OpenVINO compiles the bfloat16 file in {computed} on this CPU")
        return ServingPath(
            batched.predict,
            lambda x: single.request.infer({0: x}),
            lambda x: batched.request.infer({0: x}),
            runtime="OpenVINO CPU plugin, compiled at batch 1 and at batch 8",
            precision=precision,
            inference_precision=computed,
            weights_bytes=os.path.getsize(path[: -len(".xml")] + ".bin"),
        )

    return build


def build_timm(dtype):
    def build(model, work):
        if work["name"] != "vit_b16":
            raise Skip("timm has no model of the demo's hybrid (keras_vit's R(1,1) + 1x1 patches)")
        try:
            import torch

            timm_vit = speed_runners.import_timm_vit()
        except ImportError as e:
            raise Skip(f"not installed ({e}): pip install timm torch==2.13.0") from e
        if "timm_model" not in work:
            torch.manual_seed(0)
            arch = work["arch"]
            work["timm_model"] = timm_vit.VisionTransformer(
                img_size=work["image_size"],
                patch_size=arch["patch_size"],
                embed_dim=arch["hidden_size"],
                depth=arch["num_layers"],
                num_heads=arch["num_heads"],
                mlp_ratio=arch["mlp_dim"] / arch["hidden_size"],
                num_classes=1000,
            ).eval()
        timm_model = work["timm_model"]
        autocast = dtype == "bfloat16"

        def forward(x):
            images = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2)) / 127.5 - 1)
            with (
                torch.inference_mode(),
                torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast),
            ):
                return timm_model(images.float()).float().numpy()

        def predict(pixels):
            pixels = np.asarray(pixels, np.float32)
            return _softmax(
                np.concatenate([forward(pixels[i : i + 25]) for i in range(0, len(pixels), 25)])
            )

        return ServingPath(
            predict,
            forward,
            forward,
            runtime=f"timm {__import__('timm').__version__}, torch {torch.__version__}, eager"
            + (", bfloat16 autocast" if autocast else ""),
            torch_threads=torch.get_num_threads(),
            reference="timm_float32 (its own random weights)",
        )

    return build


BUILDERS = {
    "keras": build_keras,
    "saved_model": build_saved_model,
    "tflite_float32": build_tflite("none"),
    "tflite_float16": build_tflite("float16"),
    "tflite_int8": build_tflite("int8"),
    "onnx_float32": build_onnx_float32,
    "onnx_int8_dynamic": build_onnx_int8_dynamic,
    "openvino_float32": build_openvino("float32"),
    "openvino_bfloat16": build_openvino("bfloat16"),
    "openvino_int8": build_openvino("int8"),
    "timm_float32": build_timm("float32"),
    "timm_bfloat16": build_timm("bfloat16"),
}


def vit_model(args):
    keras.utils.set_random_seed(0)
    model = keras_vit.build_model(args.vit_variant, num_classes=1000, image_size=args.image_size)
    arch = VARIANTS[args.vit_variant]
    info = {"variant": args.vit_variant, "weights": "random (initialisation, random head)"}
    return randomize_head(model), arch, info


def hybrid_model(args):
    if args.hybrid_run_dir:
        from keras_vit_deploy import sources

        return sources.load_run_dir(args.hybrid_run_dir), None, {"run_dir": args.hybrid_run_dir}
    config = fashion_mnist_hybrid.get_config()
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(
        image_size=config.image_size, num_classes=10, name="fashion_mnist_hybrid", **config.model
    )
    images, labels = (
        a[: args.hybrid_train_steps * 128]
        for a in fashion_mnist_data.read_split(fashion_mnist_data.FASHION_MNIST_DIR, "train")
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(config.learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    pixels = np.repeat(images[..., None], 3, axis=-1).astype(np.float32) / 127.5 - 1
    start = time.perf_counter()
    model.fit(pixels, labels.astype(np.int64), batch_size=128, epochs=1, verbose=0)
    info = {
        "config": "configs/fashion_mnist_hybrid.py (stage2)",
        "weights": f"trained here: {args.hybrid_train_steps} AdamW steps of 128 images "
        "(not the demo's trained model)",
        "train_seconds": round(time.perf_counter() - start, 1),
    }
    return model, None, info


def build_paths(name, model, arch, args, work_dir):
    size = tuple(model.image_size)
    count = args.num_images if name == "vit_b16" else args.hybrid_images
    pixels, labels = datasets.fashion_mnist_test(size, count + args.calibration_images)
    calibration, pixels, labels = pixels[count:], pixels[:count], labels[:count]
    if model.num_classes != 10:
        labels = None  # not its classes: agreement only
    work = {
        "dir": os.path.join(work_dir, name),
        "name": name,
        "arch": arch,
        "image_size": size[0],
        "calibration": calibration,
        "threads": args.threads,
    }
    os.makedirs(work["dir"])
    reference = None
    paths, results = {}, {}
    for path_name in args.paths:
        start = time.perf_counter()
        try:
            path = BUILDERS[path_name](model, work)
        except Skip as e:
            results[path_name] = {"status": "skipped", "reason": str(e)}
            print(f"  {name} {path_name}: skipped: {e}", flush=True)
            continue
        except Exception as e:  # a converter or runtime that fails here: recorded, not fatal
            results[path_name] = {"status": "failed", "reason": f"{type(e).__name__}: {e}"[:500]}
            print(f"  {name} {path_name}: failed: {results[path_name]['reason']}", flush=True)
            continue
        probabilities = path.predict(pixels)
        if path_name == "keras":
            reference = probabilities
        own = path.facts.get("reference")
        against = work.get("timm_reference") if own else reference
        if path_name == "timm_float32":
            work["timm_reference"] = against = probabilities
        result = {"status": "ok", **path.facts, "setup_s": round(time.perf_counter() - start, 1)}
        if against is not None:
            result.update(report.compare(against, probabilities, labels, file_format="path"))
            if labels is not None:
                result["accuracy"] = result.pop("path_accuracy")
        results[path_name] = result
        paths[path_name] = path
        print(f"  {name} {path_name}: ready in {result['setup_s']} s", flush=True)
    return paths, results, pixels


def versions():
    """{package: version} of the runtimes measured (None: not installed)."""
    from importlib import metadata

    found = {}
    for name in VERSIONED:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def time_paths(paths, pixels, args):
    """{name: {'batch_1': [s, ...], 'batch_8': [s, ...]}} over the interleaved rounds."""
    singles = [np.asarray(image[None], np.float32) for image in pixels[: max(args.repeats, 1)]]
    batch = np.resize(np.asarray(pixels, np.float32), (BATCH, *pixels.shape[1:]))
    times = {name: {"batch_1": [], "batch_8": []} for name in paths}
    names = list(paths)
    for name in names:  # warm-up: first calls compile and allocate
        paths[name].call_1(singles[0])
        paths[name].call_8(batch)
    for round_index in range(args.rounds):
        shift = round_index % len(names)
        for name in names[shift:] + names[:shift]:
            path = paths[name]
            for i in range(args.repeats):
                x = singles[i % len(singles)]
                start = time.perf_counter()
                path.call_1(x)
                times[name]["batch_1"].append(time.perf_counter() - start)
            for _ in range(args.steps):
                start = time.perf_counter()
                path.call_8(batch)
                times[name]["batch_8"].append(time.perf_counter() - start)
        print(f"  round {round_index + 1}/{args.rounds}, {uptime()}", flush=True)
    return times


def summarise(times):
    out = {}
    for name, measured in times.items():
        ms = np.asarray(measured["batch_1"]) * 1e3
        step = float(np.median(measured["batch_8"]))
        out[name] = {
            "batch_1": {
                "median_ms": float(np.median(ms)),
                "p99_ms": float(np.percentile(ms, 99)),
                "calls": int(len(ms)),
            },
            "batch_8": {
                "images_per_s": BATCH / step,
                "median_step_s": step,
                "calls": len(measured["batch_8"]),
            },
        }
    return out


def targets(paths):
    """Issue #49's targets on ViT-B/16 at batch 8, against timm in the same run."""

    def speed(name):
        path = paths.get(name, {})
        return path.get("batch_8", {}).get("images_per_s") if path.get("status") == "ok" else None

    ours = {
        name: p
        for name, p in paths.items()
        if p.get("status") == "ok" and not name.startswith("timm") and "batch_8" in p
    }
    within = {n: p for n, p in ours.items() if p.get("top1_agreement", 0) >= 0.99}
    fastest = max(within, key=lambda n: within[n]["batch_8"]["images_per_s"], default=None)
    int8 = [n for n in ours if "int8" in n]
    fastest_int8 = max(int8, key=lambda n: ours[n]["batch_8"]["images_per_s"], default=None)
    timm_bf16, timm_f32 = speed("timm_bfloat16"), speed("timm_float32")

    def ratio(name, peer):
        return name and peer and ours[name]["batch_8"]["images_per_s"] / peer

    return {
        "fastest_within_99": fastest,
        "fastest_vs_timm_bfloat16": ratio(fastest, timm_bf16),
        "fastest_vs_timm_float32": ratio(fastest, timm_f32),
        "fastest_int8": fastest_int8,
        "fastest_int8_vs_timm_bfloat16": ratio(fastest_int8, timm_bf16),
    }


def markdown_table(summary):
    lines = [
        "| model | path | batch 1 median ms | batch 1 p99 ms | batch 8 images/s | "
        "top-1 agreement | max abs dprob | accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for model, measured in summary["models"].items():
        for name, p in measured["paths"].items():
            if p["status"] != "ok":
                lines.append(f"| {model} | {name} | {p['status']}: {p['reason']} | | | | | |")
                continue
            accuracy = f"{100 * p['accuracy']:.1f}%" if "accuracy" in p else ""
            agreement = f"{100 * p['top1_agreement']:.1f}%" if "top1_agreement" in p else ""
            delta = (
                f"{p['max_abs_delta_probability']:.1e}" if "max_abs_delta_probability" in p else ""
            )
            lines.append(
                f"| {model} | {name} | {p['batch_1']['median_ms']:.2f} | "
                f"{p['batch_1']['p99_ms']:.2f} | {p['batch_8']['images_per_s']:.1f} | "
                f"{agreement} | {delta} | {accuracy} |"
            )
    return "\n".join(lines)


def chart(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(summary["models"])
    fig, axes = plt.subplots(len(models), 2, figsize=(12, 3.2 * len(models)), squeeze=False)
    for row, model in enumerate(models):
        ok = {n: p for n, p in summary["models"][model]["paths"].items() if p["status"] == "ok"}
        names = list(ok)
        colours = ["tab:grey" if n.startswith("timm") else "tab:blue" for n in names]
        for col, (key, metric, label) in enumerate(
            (
                ("batch_1", "median_ms", "batch 1: median ms (lower is better)"),
                ("batch_8", "images_per_s", "batch 8: images/s (higher is better)"),
            )
        ):
            axis = axes[row][col]
            axis.barh(names, [ok[n][key][metric] for n in names], color=colours)
            axis.invert_yaxis()
            axis.set_title(f"{model}: {label}", fontsize=9)
            axis.tick_params(labelsize=8)
    kind = summary["machine"].get("cpu_kind")
    fig.suptitle(
        f"CPU serving paths on {kind}, {summary['machine']['usable_cpus']} CPUs (timm grey)",
        fontsize=10,
    )
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)


def main(argv=None):
    args = parse_args(argv)
    if args.json:
        console.check_output(args.json, "--json")
    print(machine.describe(), flush=True)
    summary = {
        "command": " ".join(["python", "benchmarks/serving_cpu.py", *sys.argv[1:]]),
        "commit": machine.source_commit(),
        "uptime_before": uptime(),
        "settings": {
            **{k: v for k, v in vars(args).items() if k not in ("json", "chart")},
            "OMP_WAIT_POLICY": os.environ["OMP_WAIT_POLICY"],
        },
        "models": {},
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="serving_cpu_") as work_dir:
        for name in args.models:
            model, arch, info = vit_model(args) if name == "vit_b16" else hybrid_model(args)
            paths, results, pixels = build_paths(name, model, arch, args, work_dir)
            for path_name, measured in summarise(time_paths(paths, pixels, args)).items():
                results[path_name].update(measured)
            summary["models"][name] = {
                "model": {
                    "name": model.name,
                    "image_size": list(model.image_size),
                    "num_classes": model.num_classes,
                    "parameters": int(model.count_params()),
                    **info,
                },
                "num_images": int(len(pixels)),
                "paths": results,
            }
            if name == "vit_b16":
                summary["models"][name]["targets"] = targets(results)
    summary["seconds"] = round(time.perf_counter() - start, 1)
    summary["uptime_after"] = uptime()
    summary["versions"] = versions()
    summary["machine"] = machine.machine_info()
    print(markdown_table(summary))
    print(json.dumps({m: v.get("targets") for m, v in summary["models"].items()}, indent=1))
    if args.json:
        machine.report(summary, args.json)
    if args.chart:
        chart(summary, args.chart)


if __name__ == "__main__":
    main()
