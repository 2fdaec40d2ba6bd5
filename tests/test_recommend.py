"""deploy/recommend.py: the serving path recommended per CPU kind, read from
benchmarks/serving_cpu.py's results: the fastest within the agreement floor, for
the caller's CPU kind, or another kind's said to be so; none without results."""

import json

from keras_vit_deploy import recommend


def _result(kind, paths):
    return {"machine": {"cpu_kind": kind}, "models": {recommend.MODEL: {"paths": paths}}}


def _path(ms, images_per_s, agreement):
    return {
        "batch_1": {"median_ms": ms},
        "batch_8": {"images_per_s": images_per_s},
        "top1_agreement": agreement,
    }


PATHS = {
    "keras": _path(100.0, 10.0, 1.0),
    "openvino_bfloat16": _path(40.0, 30.0, 0.995),
    "onnx_int8": _path(20.0, 50.0, 0.9),  # fastest, but below the floor
    "tflite_float16": {"status": "skipped", "reason": "not here"},  # not measured
}


def test_the_fastest_path_within_the_agreement_floor_for_this_cpu_kind(tmp_path):
    for name, kind in (("serving_cpu_a.json", "Zen"), ("serving_cpu_b.json", "Xeon")):
        other = {"keras": _path(50.0, 20.0, 1.0)}
        (tmp_path / name).write_text(json.dumps(_result(kind, PATHS if kind == "Zen" else other)))
    results = recommend.load_results(str(tmp_path / "serving_cpu*.json"))
    answer = recommend.recommendation("Zen", results)
    assert answer["same_kind"] and answer["measured_cpu_kind"] == "Zen"
    assert answer["batch_1"] == {
        "path": "openvino_bfloat16",
        "median_ms": 40.0,
        "top1_agreement": 0.995,
    }
    assert answer["batch_8"]["path"] == "openvino_bfloat16"
    line = recommend.sentence(answer)
    assert "on Zen: batch 1: openvino_bfloat16 (40.0 ms, top-1 agreement 99.5%)" in line
    assert recommend.recommendation("Xeon", results)["batch_8"]["path"] == "keras"


def test_another_kind_is_named_as_such_and_no_results_say_so(tmp_path):
    answer = recommend.recommendation(
        "Zen 5", [{**_result("Zen", PATHS), "path": str(tmp_path / "x.json")}]
    )
    assert not answer["same_kind"]
    assert "measured on Zen, not this CPU (Zen 5)" in recommend.sentence(answer)
    assert recommend.recommendation("Zen", []) is None
    assert "not measured here" in recommend.sentence(None)
    floor = {"only": _path(10.0, 10.0, recommend.AGREEMENT_FLOOR - 0.01)}
    assert recommend.fastest(floor, 1) is None
