"""Export reports for a model that is not the demo's: 3 classes at 32 px, its run
made on a folder of its own (tests/trainer_testing.py's bands). The reports compare
on the run's own data (RUN/data.json) or --eval_data's; a comparison set whose
classes cannot be the model's is one error line naming the flag, before anything is
written; without labelled data of the model's classes the report gives agreement
alone and says so (deploy/datasets.py `comparison_set`). ONNX's int8 dynamic file
with its report, and the recommendation for this model's size class."""

import json

import export_testing as et
import keras
import numpy as np
import pytest
import trainer_testing as tt
from tiny_models import tiny_vit

from keras_vit_data import fashion_mnist
from keras_vit_deploy import datasets, onnx_runtime, recommend

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="the exports build TensorFlow graphs"
)

NUM_CLASSES, SIZE = 3, 32
NAMES = [f"class_{i}" for i in range(NUM_CLASSES)]
N_TEST = 24  # the data's test split (trainer_testing.make_tiny_data: seed 1)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("bands") / "data")
    tt.make_tiny_data(path, n_train=8, n_test=N_TEST, num_classes=NUM_CLASSES, size=SIZE)
    return path


@pytest.fixture(scope="module")
def test_split():
    """The data's test split as written: grey bands repeated to RGB, and the labels."""
    images, labels = tt.synthetic_split(N_TEST, 1, NUM_CLASSES, SIZE)
    return np.repeat(images[..., None], 3, axis=-1), labels


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(3)
    model = tiny_vit(image_size=SIZE, patch_size=8, num_classes=NUM_CLASSES, name="bands")
    rng = np.random.default_rng(3)  # the zero head too: predictions that depend on the image
    model.set_weights(
        [w + rng.normal(0, 0.3, w.shape).astype(w.dtype) for w in model.get_weights()]
    )
    return model


@pytest.fixture(scope="module")
def run_dir(model, data_dir, tmp_path_factory):
    return et.write_run_dir(model, str(tmp_path_factory.mktemp("run") / "run"), NAMES, data_dir)


@pytest.fixture(scope="module")
def fashion_records(tmp_path_factory):
    pixels, labels = et.fashion_mnist(20)
    return et.write_tfrecord(str(tmp_path_factory.mktemp("fm") / "test.tfrecord"), pixels, labels)


def test_the_report_compares_on_the_runs_own_data(run_dir, data_dir, test_split):
    pixels, labels = test_split
    for given in ({"run_dir": run_dir}, {"eval_data": data_dir}):
        comparison = datasets.comparison_set(
            (SIZE, SIZE), 10, num_classes=NUM_CLASSES, class_names=NAMES, **given
        )
        np.testing.assert_array_equal(comparison.pixels, pixels[:10])
        np.testing.assert_array_equal(comparison.labels, labels[:10])
        assert data_dir in comparison.source and comparison.source.endswith("test split")
        assert comparison.note == f"accuracy and agreement on {comparison.source}"


def test_a_comparison_set_of_other_classes_is_refused_naming_the_flag(data_dir, fashion_records):
    size = (SIZE, SIZE)
    with pytest.raises(
        datasets.DataError,
        match=rf"^--eval_data={fashion_records}: labels up to 9; the model has 3 classes: "
        r"not its data set \(pass the model's own data, or leave --eval_data out\)$",
    ):
        datasets.comparison_set(size, 20, eval_data=fashion_records, num_classes=NUM_CLASSES)
    with pytest.raises(
        datasets.DataError,
        match=rf"^--eval_data={data_dir}: its classes \(class_0, class_1, class_2\) are not "
        r"the model's \(cat, dog, bird\)",
    ):
        datasets.comparison_set(
            size, 5, eval_data=data_dir, num_classes=3, class_names=["cat", "dog", "bird"]
        )
    with pytest.raises(datasets.DataError, match=r"3 classes \(class_0, .*\); the model has 10"):
        datasets.comparison_set(size, 5, eval_data=data_dir, num_classes=10)


def test_without_data_of_its_classes_the_report_gives_agreement_alone(tmp_path):
    """A 10-class model of other classes is never scored on Fashion-MNIST."""
    size = (SIZE, SIZE)
    others = [f"kind_{i}" for i in range(10)]
    for names, why in ((others, "its class names are not"), (None, "no class names say it is")):
        comparison = datasets.comparison_set(
            size, 5, run_dir=str(tmp_path), num_classes=10, class_names=names
        )
        assert comparison.labels is None and comparison.source == "fashion_mnist_test"
        assert comparison.note.startswith("agreement with the reference alone, on Fashion-MNIST")
        assert f"{why} Fashion-MNIST's" in comparison.note and "--eval_data=" in comparison.note
    scored = datasets.comparison_set(
        size, 5, run_dir=str(tmp_path), num_classes=10, class_names=fashion_mnist.CLASS_NAMES
    )
    np.testing.assert_array_equal(scored.labels, et.fashion_mnist(5)[1])


def test_onnx_int8_dynamic_with_its_report_on_the_runs_data(
    model, run_dir, data_dir, test_split, tmp_path
):
    output, report_path = tmp_path / "bands_int8.onnx", tmp_path / "report.json"
    result = et.run_tool(
        [
            "tools/export_onnx.py",
            f"--run_dir={run_dir}",
            "--precision=int8_dynamic",
            f"--output={output}",
            f"--report={report_path}",
            "--latency_repeats=5",
        ]
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    written = json.loads(report_path.read_text())
    assert written["precision"] == "int8_dynamic"
    assert {"MatMulInteger", "DynamicQuantizeLinear"} <= set(written["op_counts"])
    pixels, labels = test_split
    expected = et.keras_probabilities(model, pixels)
    produced = onnx_runtime.ONNXClassifier(str(output)).predict(pixels)
    assert written["num_images"] == N_TEST and written["eval_data"].startswith(data_dir)
    assert written["top1_agreement"] == pytest.approx(
        np.mean(produced.argmax(1) == expected.argmax(1))
    )
    assert written["reference_accuracy"] == pytest.approx(np.mean(expected.argmax(1) == labels))
    assert written["onnx_accuracy"] == pytest.approx(np.mean(produced.argmax(1) == labels))
    recommended = written["recommended_runtime"]
    assert recommended["size"] == {"parameters": model.count_params(), "image_size": [SIZE, SIZE]}
    assert recommended["model"] == "hybrid"  # the nearest measured model
    assert recommend.sentence(recommended) in lines
    assert lines[-1] == (
        f"Report {report_path}: {N_TEST} images of {written['eval_data']}, top-1 agreement "
        f"{100 * written['top1_agreement']:.1f}%, max |delta probability| "
        f"{written['max_abs_delta_probability']:.2g}, accuracy "
        f"{100 * written['onnx_accuracy']:.1f}% (reference "
        f"{100 * written['reference_accuracy']:.1f}%)."
    )


def test_cli_refuses_other_classes_before_writing_anything(run_dir, fashion_records, tmp_path):
    output, report_path = tmp_path / "x.tflite", tmp_path / "report.json"
    result = et.run_tool(
        [
            "tools/export_tflite.py",
            f"--run_dir={run_dir}",
            f"--output={output}",
            f"--report={report_path}",
            f"--eval_data={fashion_records}",
        ]
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        f"error: --eval_data={fashion_records}: labels up to 9; the model has 3 classes: not "
        "its data set (pass the model's own data, or leave --eval_data out)"
    ]
    assert result.stdout == "" and sorted(tmp_path.iterdir()) == []
