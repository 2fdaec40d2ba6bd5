"""pretrain.py --config.evals.fewshot.every=N runs the few-shot evaluator during training."""

import json
import os

import keras
import pytest
import trainer_testing as testing

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)


def test_pretrain_reports_periodic_fewshot(tmp_path):
    data = str(tmp_path / "data")
    testing.make_tiny_data(data)
    run_dir = str(tmp_path / "run")
    r = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--strategy=default",
            "--config.total_steps=4",
            "--config.checkpoint_every=2",
            "--config.evals.fewshot.every=2",
            "--config.evals.fewshot.shots=(1,5)",
            "--config.evals.fewshot.num_seeds=2",
            "--config.evals.fewshot.representation=gap",
        )
    )
    assert r.returncode == 0, r.stderr[-3000:]
    with open(os.path.join(run_dir, "metrics.json")) as f:
        metrics = json.load(f)
    fewshot = metrics["evals"]["fewshot"]["history"]
    assert 0 <= metrics["fewshot_5shot"] <= 1
    assert sorted(int(step) for step in fewshot) == [2, 4]
    for results in fewshot.values():
        text = json.dumps(results)
        assert "1" in text and "5" in text
