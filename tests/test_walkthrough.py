"""docs/finetune_your_images.md, run as written (tests/doc_blocks.py): a folder of real
images (scikit-learn's digits) -> TFRecords with a holdout -> pre-training -> fine-tuning
-> validation accuracy -> SavedModel and TFLite -> a TF Serving request answered in
process. Small step counts come from the page's own variables."""

import json
import os

import doc_blocks
import keras
import pytest

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the trainers are TensorFlow programs"
)
PAGE = os.path.join(doc_blocks.ROOT, "docs", "finetune_your_images.md")
DIGITS, CLASSES = 1797, 10


def test_the_page_runs_as_written(tmp_path):
    work = tmp_path / "work"
    result = doc_blocks.run(
        PAGE,
        env={
            "WORK": str(work),
            "PRETRAIN_STEPS": "20",
            "PRETRAIN_IMAGES": "1000",
            "FINETUNE_STEPS": "30",
            "KERAS_VIT_VERBOSITY": "quiet",
        },
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # Step 1-2: every digit written, a stratified tenth held out and recorded.
    with open(work / "data" / "manifest.json") as f:
        manifest = json.load(f)
    splits = {name: info["count"] for name, info in manifest["splits"].items()}
    assert splits["train"] + splits["validation"] == DIGITS
    assert manifest["holdout"]["fraction"] == 0.1
    assert sum(manifest["holdout"]["validation_per_class"]) == splits["validation"]
    assert manifest["class_names"] == [str(d) for d in range(CLASSES)]
    # Step 4-5: the fine-tuned run evaluated on validation, periodically and at the end.
    with open(work / "digits" / "metrics.json") as f:
        metrics = json.load(f)
    assert metrics["step"] == 30
    assert 0.0 <= metrics["validation_accuracy"] <= 1.0
    assert metrics["evals"]["validation"]["history"]
    assert "test_accuracy" not in metrics  # the digits folder has no test split
    assert f"validation accuracy {metrics['validation_accuracy']:.4f}" in result.stdout
    # Step 6: the TFLite file was checked against the SavedModel on validation images.
    with open(work / "digits_tflite.json") as f:
        report = json.load(f)
    assert report["num_images"] == 100
    assert report["top1_agreement"] >= 0.95
    # Step 7: the served answer names a digit class with probabilities over the 10.
    answer = json.loads(result.stdout.strip().splitlines()[-1])
    (prediction,) = answer["predictions"]
    probabilities = prediction["probabilities"]
    assert len(probabilities) == CLASSES
    assert abs(sum(probabilities) - 1.0) < 1e-5
