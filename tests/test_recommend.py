"""deploy/recommend.py: the serving path recommended per CPU kind, read from
benchmarks/serving_cpu.py's results: the fastest within the agreement floor among the
paths a tool of ours writes, for the measured model nearest the exported one in size,
for the caller's CPU kind, or another kind's said to be so; none without results."""

import json
import os

from keras_vit_deploy import onnx_export, openvino_export, recommend, tflite

# The two measured models' facts as benchmarks/serving_cpu.py records them.
VIT_B16 = {"parameters": 86_567_656, "image_size": [224, 224]}
HYBRID = {"parameters": 685_738, "image_size": [28, 28]}


def _result(kind, paths, hybrid_paths=None):
    models = {recommend.MODEL: {"model": VIT_B16, "paths": paths}}
    if hybrid_paths is not None:
        models["hybrid"] = {"model": HYBRID, "paths": hybrid_paths}
    return {"machine": {"cpu_kind": kind}, "models": models}


def _path(ms, images_per_s, agreement):
    return {
        "batch_1": {"median_ms": ms},
        "batch_8": {"images_per_s": images_per_s},
        "top1_agreement": agreement,
    }


PATHS = {
    "keras": _path(100.0, 10.0, 1.0),
    "openvino_bfloat16": _path(40.0, 30.0, 0.995),
    "onnx_int8_dynamic": _path(20.0, 50.0, 0.9),  # fastest, but below the floor
    "timm_bfloat16": _path(5.0, 90.0, 1.0),  # faster still, but no tool of ours writes it
    "tflite_float16": {"status": "skipped", "reason": "not here"},  # not measured
}
HYBRID_PATHS = {"keras": _path(5.0, 700.0, 1.0), "tflite_float16": _path(0.7, 1900.0, 1.0)}


def test_the_fastest_path_we_write_within_the_agreement_floor_for_this_cpu_kind(tmp_path):
    for name, kind in (("serving_cpu_a.json", "Zen"), ("serving_cpu_b.json", "Xeon")):
        other = {"keras": _path(50.0, 20.0, 1.0)}
        (tmp_path / name).write_text(json.dumps(_result(kind, PATHS if kind == "Zen" else other)))
    results = recommend.load_results(str(tmp_path / "serving_cpu*.json"))
    answer = recommend.recommendation("Zen", results=results)
    assert answer["same_kind"] and answer["measured_cpu_kind"] == "Zen"
    assert answer["model"] == recommend.MODEL and answer["size"] is None
    assert answer["batch_1"] == {
        "path": "openvino_bfloat16",
        "median_ms": 40.0,
        "top1_agreement": 0.995,
        "command": "tools/export_openvino.py --precision=bfloat16",
    }
    assert answer["batch_8"]["path"] == "openvino_bfloat16"
    line = recommend.sentence(answer)
    assert (
        "on Zen: batch 1: openvino_bfloat16 (40.0 ms, top-1 agreement 99.5%; "
        "tools/export_openvino.py --precision=bfloat16)" in line
    )
    assert "for ViT-B/16 (87 M parameters at 224x224 px)" in line
    assert recommend.recommendation("Xeon", results=results)["batch_8"]["path"] == "keras"


def test_a_model_gets_the_answer_of_the_measured_model_nearest_its_size():
    results = [{**_result("Zen", PATHS, HYBRID_PATHS), "path": recommend.ROOT + "/r.json"}]
    small = {"parameters": 120_000, "image_size": [32, 32]}  # a 3-class 32-px model
    answer = recommend.recommendation("Zen", small, results)
    assert answer["model"] == "hybrid" and answer["size"] == small
    assert answer["batch_1"]["path"] == "tflite_float16"
    assert answer["batch_1"]["command"] == "tools/export_tflite.py --quantization=float16"
    line = recommend.sentence(answer)
    assert line.startswith(
        "Recommended runtime for this model (0.12 M parameters at 32x32 px), read from the "
        "nearest measured model, the demo's hybrid (0.69 M parameters at 28x28 px), on Zen: "
    ), line
    big = {"parameters": 300_000_000, "image_size": [384, 384]}
    assert recommend.recommendation("Zen", big, results)["model"] == recommend.MODEL


def test_every_recommended_path_is_written_by_a_tool_of_ours():
    results = recommend.load_results()
    assert results, "benchmarks/results/serving_cpu*.json"
    for result in results:
        for measured in result["models"].values():
            for batch in (1, 8):
                picked = recommend.fastest(measured["paths"], batch)
                assert picked is None or picked[0] in recommend.WRITERS
    # Each command names a tool and a value its flag takes.
    accepted = {
        "--precision": {
            "tools/export_onnx.py": onnx_export.PRECISIONS,
            "tools/export_openvino.py": openvino_export.PRECISIONS,
        },
        "--quantization": {"tools/export_tflite.py": tflite.QUANTIZATIONS},
    }
    for command in recommend.WRITERS.values():
        tool, *flags = command.split()
        if tool.startswith("tools/"):
            assert os.path.isfile(os.path.join(recommend.ROOT, tool)), command
        for flag in (f for f in flags if f.startswith("--")):
            name, value = flag.split("=")
            if name in accepted:
                assert value in accepted[name][tool], command


def test_another_kind_is_named_as_such_and_no_results_say_so(tmp_path):
    answer = recommend.recommendation(
        "Zen 5", results=[{**_result("Zen", PATHS), "path": str(tmp_path / "x.json")}]
    )
    assert not answer["same_kind"]
    assert "measured on Zen, not this CPU (Zen 5)" in recommend.sentence(answer)
    assert recommend.recommendation("Zen", results=[]) is None
    assert "not measured here" in recommend.sentence(None)
    floor = {"only_keras": {"keras": _path(10.0, 10.0, recommend.AGREEMENT_FLOOR - 0.01)}}
    assert recommend.fastest(floor["only_keras"], 1) is None
