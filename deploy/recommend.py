"""Which serving path to pick on a CPU, for the model just exported: the one owner of
that recommendation, read from what benchmarks/serving_cpu.py measured
(benchmarks/results/serving_cpu*.json) and printed by every export tool
(tools/export_*.py) and written into their reports.

The results hold a few measured models (ViT-B/16 at 224 px; the demo's hybrid at
28 px). A model is recommended for by the measured model of its size class: the one
nearest in parameters x input pixels (a proxy of its compute per image, compared on
a log scale), and the line says which model that is and that it was read, not
measured on this model. Among that model's paths, the ones a tool of ours writes
(`WRITERS`, each named with the command that writes it; timm is not ours), a path is
recommended at batch 1 (lowest median latency) and at batch 8 (most images/s) among
those whose top-1 agreement with the float32 Keras model is at least
`AGREEMENT_FLOOR`, for a CPU kind (the caller's, cli/machine.py `cpu_kind`: the
tools pass this machine's). A CPU kind that was not measured gets a measured kind's
answer, said to be from another kind. Reads only JSON: no TensorFlow, no runtime
imported.
"""

import glob
import json
import math
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_GLOB = os.path.join(ROOT, "benchmarks", "results", "serving_cpu*.json")
MODEL = "vit_b16"  # the size class without a model to compare (`recommendation`)
AGREEMENT_FLOOR = 0.99  # top-1 agreement with float32 Keras (issue #49's bound)
# What the line calls each measured model (benchmarks/serving_cpu.py's MODELS).
LABELS = {"vit_b16": "ViT-B/16", "hybrid": "the demo's hybrid"}
# The serving paths a tool of ours writes, and the command that writes each: the only
# paths recommended.
WRITERS = {
    "keras": "the Keras model itself: keras_vit.load_model / a run directory",
    "saved_model": "tools/export_savedmodel.py",
    "tflite_float32": "tools/export_tflite.py",
    "tflite_float16": "tools/export_tflite.py --quantization=float16",
    "tflite_int8": "tools/export_tflite.py --quantization=int8 --representative_data=GLOB",
    "onnx_float32": "tools/export_onnx.py",
    "onnx_int8_dynamic": "tools/export_onnx.py --precision=int8_dynamic",
    "openvino_float32": "tools/export_openvino.py",
    "openvino_bfloat16": "tools/export_openvino.py --precision=bfloat16",
    "openvino_int8": "tools/export_openvino.py --precision=int8 --representative_data=GLOB",
}


def load_results(pattern=RESULTS_GLOB):
    """The measured results files matching `pattern`, sorted by name; [] without
    any (an installed package has no benchmarks/results)."""
    results = []
    for path in sorted(glob.glob(pattern)):
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
        result["path"] = path
        results.append(result)
    return results


def model_size(model):
    """{'parameters', 'image_size'} of a Keras model, as `recommendation` compares it."""
    return {"parameters": int(model.count_params()), "image_size": list(model.image_size)}


def saved_model_size(loaded, image_size):
    """`model_size` of a loaded SavedModel: its variables' values, at `image_size`."""
    parameters = sum(math.prod(int(d) for d in v.shape) for v in loaded.variables)
    return {"parameters": int(parameters), "image_size": list(image_size)}


def onnx_size(constant_bytes, image_size):
    """`model_size` of an ONNX file of `constant_bytes` of constants (float32: 4 bytes a
    parameter, an estimate for other precisions), at `image_size`."""
    return {"parameters": int(constant_bytes) // 4, "image_size": list(image_size)}


def _compute(size):
    height, width = size["image_size"]
    return max(1, size["parameters"]) * height * width


def size_class(models, size):
    """The key of the model in `models` (a results file's {key: {'model': facts}})
    nearest `size` ({'parameters', 'image_size'}) in log(parameters x pixels); None
    without `size` or without the facts to compare (then `MODEL`)."""
    known = {
        key: measured["model"]
        for key, measured in models.items()
        if {"parameters", "image_size"} <= set(measured.get("model", {}))
    }
    if not size or not known:
        return None
    wanted = math.log(_compute(size))
    return min(known, key=lambda key: abs(math.log(_compute(known[key])) - wanted))


def _eligible(paths, batch):
    key, metric = ("batch_1", "median_ms") if batch == 1 else ("batch_8", "images_per_s")
    for name, path in paths.items():
        if name not in WRITERS:
            continue
        value = (path.get(key) or {}).get(metric)
        agreement = path.get("top1_agreement")
        if value is not None and agreement is not None and agreement >= AGREEMENT_FLOOR:
            yield name, value, path


def fastest(paths, batch):
    """(name, path dict) of the fastest path at `batch` (1: lowest median ms; 8:
    most images/s) among `paths` ({name: measured}) that a tool of ours writes
    (`WRITERS`) within the agreement floor; None if none was measured."""
    found = list(_eligible(paths, batch))
    if not found:
        return None
    pick = min if batch == 1 else max
    name, _, path = pick(found, key=lambda item: item[1])
    return name, path


def recommendation(cpu_kind, size=None, results=None):
    """The recommendation for a model of `size` (`model_size`; None: ViT-B/16's
    class) on `cpu_kind`, from `results` (default: `load_results()`):
    {'cpu_kind', 'measured_cpu_kind', 'same_kind', 'model', 'model_label',
    'measured_model', 'size', 'agreement_floor', 'results_file', 'batch_1', 'batch_8'},
    each batch {'path', 'median_ms' / 'images_per_s', 'top1_agreement', 'command'};
    None when no results file is at hand."""
    results = load_results() if results is None else results
    if not results:
        return None
    same = [r for r in results if r["machine"].get("cpu_kind") == cpu_kind]
    result = (same or results)[-1]
    key = size_class(result["models"], size) or MODEL
    measured = result["models"][key]
    answer = {
        "cpu_kind": cpu_kind,
        "measured_cpu_kind": result["machine"].get("cpu_kind"),
        "same_kind": bool(same),
        "model": key,
        "model_label": LABELS.get(key, key),
        "measured_model": {
            k: v for k, v in measured.get("model", {}).items() if k in ("parameters", "image_size")
        },
        "size": size,
        "agreement_floor": AGREEMENT_FLOOR,
        "results_file": os.path.relpath(result["path"], ROOT),
    }
    for batch, metric in ((1, "median_ms"), (8, "images_per_s")):
        picked = fastest(measured["paths"], batch)
        answer[f"batch_{batch}"] = picked and {
            "path": picked[0],
            metric: picked[1][f"batch_{batch}"][metric],
            "top1_agreement": picked[1]["top1_agreement"],
            "command": WRITERS[picked[0]],
        }
    return answer


def _describe(size):
    return (
        f"{size['parameters'] / 1e6:.2g} M parameters at "
        f"{size['image_size'][0]}x{size['image_size'][1]} px"
    )


def sentence(answer):
    """`recommendation(...)`'s answer as the export tools print it: one line that
    says for which measured model it was read, on which CPU kind, and the command
    that writes each recommended path."""
    if not answer:
        return (
            "Recommended runtime: not measured here (benchmarks/serving_cpu.py writes "
            "benchmarks/results/serving_cpu*.json; docs/deployment.md)."
        )
    parts = []
    for batch, metric, unit in ((1, "median_ms", "ms"), (8, "images_per_s", "images/s")):
        picked = answer[f"batch_{batch}"]
        if picked:
            parts.append(
                f"batch {batch}: {picked['path']} ({picked[metric]:.1f} {unit}, top-1 "
                f"agreement {100 * picked['top1_agreement']:.1f}%; {picked['command']})"
            )
    measured = answer["measured_model"]
    if answer["size"]:
        whose = (
            f"for this model ({_describe(answer['size'])}), read from the nearest measured "
            f"model, {answer['model_label']}"
        )
    else:
        whose = f"for {answer['model_label']}"
    if measured.get("parameters") and measured.get("image_size"):
        whose += f" ({_describe(measured)})"
    where = (
        f"on {answer['cpu_kind']}"
        if answer["same_kind"]
        else f"measured on {answer['measured_cpu_kind']}, not this CPU ({answer['cpu_kind']})"
    )
    return (
        f"Recommended runtime {whose}, {where}: {'; '.join(parts) or 'none measured'} "
        f"({answer['results_file']}; docs/deployment.md)."
    )
