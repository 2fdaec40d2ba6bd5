"""Which serving path to pick on a CPU: the one owner of that recommendation, read
from what benchmarks/serving_cpu.py measured (benchmarks/results/serving_cpu*.json)
and named by every export tool's report (tools/export_*.py).

A path is recommended at batch 1 (lowest median latency) and at batch 8 (most
images/s) among those whose top-1 agreement with the float32 Keras model is at
least `AGREEMENT_FLOOR`, on ViT-B/16 (`MODEL`), for a CPU kind (the caller's,
cli/machine.py `cpu_kind`: the tools pass this machine's). A CPU kind that
was not measured gets a measured kind's answer, said to be from another kind. Reads
only JSON: no TensorFlow, no runtime imported.
"""

import glob
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS_GLOB = os.path.join(ROOT, "benchmarks", "results", "serving_cpu*.json")
MODEL = "vit_b16"
AGREEMENT_FLOOR = 0.99  # top-1 agreement with float32 Keras (issue #49's bound)


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


def _eligible(paths, batch):
    key, metric = ("batch_1", "median_ms") if batch == 1 else ("batch_8", "images_per_s")
    for name, path in paths.items():
        value = (path.get(key) or {}).get(metric)
        agreement = path.get("top1_agreement")
        if value is not None and agreement is not None and agreement >= AGREEMENT_FLOOR:
            yield name, value, path


def fastest(paths, batch):
    """(name, path dict) of the fastest path at `batch` (1: lowest median ms; 8:
    most images/s) among `paths` ({name: measured}) within the agreement floor;
    None if none was measured."""
    found = list(_eligible(paths, batch))
    if not found:
        return None
    pick = min if batch == 1 else max
    name, _, path = pick(found, key=lambda item: item[1])
    return name, path


def recommendation(cpu_kind, results=None):
    """{'cpu_kind', 'measured_cpu_kind', 'same_kind', 'model', 'batch_1', 'batch_8',
    'results_file'} for `cpu_kind` from `results` (default: `load_results()`), each batch
    {'path', 'median_ms' / 'images_per_s', 'top1_agreement'}; None when no
    results file is at hand."""
    results = load_results() if results is None else results
    if not results:
        return None
    same = [r for r in results if r["machine"].get("cpu_kind") == cpu_kind]
    result = (same or results)[-1]
    paths = result["models"][MODEL]["paths"]
    answer = {
        "cpu_kind": cpu_kind,
        "measured_cpu_kind": result["machine"].get("cpu_kind"),
        "same_kind": bool(same),
        "model": MODEL,
        "agreement_floor": AGREEMENT_FLOOR,
        "results_file": os.path.relpath(result["path"], ROOT),
    }
    for batch, metric in ((1, "median_ms"), (8, "images_per_s")):
        picked = fastest(paths, batch)
        key = f"batch_{batch}"
        answer[key] = picked and {
            "path": picked[0],
            metric: picked[1][key][metric],
            "top1_agreement": picked[1]["top1_agreement"],
        }
    return answer


def sentence(answer):
    """`recommendation(...)`'s answer as the export tools print it: one line."""
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
                f"agreement {100 * picked['top1_agreement']:.1f}%)"
            )
    where = (
        f"on {answer['cpu_kind']}"
        if answer["same_kind"]
        else f"measured on {answer['measured_cpu_kind']}, not this CPU ({answer['cpu_kind']})"
    )
    return (
        f"Recommended runtime for ViT-B/16 {where}: {'; '.join(parts) or 'none measured'} "
        f"({answer['results_file']}; docs/deployment.md)."
    )
