"""tools/visualize.py, tools/fewshot.py and the trainers' few-shot callback, end to
end on a tiny TFRecord directory (made by tools/make_tfrecords.py) and a tiny RUN."""

import json
import os
import sys

import keras
import numpy as np
import pytest
import warm_programs
from tiny_models import tiny_vit

import keras_vit

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_CLASSES = 4
IMAGE = 16
MODEL = dict(
    image_size=IMAGE,
    patch_size=4,
    hidden_size=16,
    mlp_dim=32,
    num_heads=2,
    num_layers=2,
    classifier="token",
    num_classes=NUM_CLASSES,
)


def texture_images(rng, count, label):
    """Class 0 flat, 1 horizontal stripes, 2 vertical stripes, 3 checkerboard; random
    contrast and noise. Location-free, so even random ViT features tell them apart."""
    rows, cols = np.indices((IMAGE, IMAGE))
    pattern = [np.zeros((IMAGE, IMAGE)), rows % 2, cols % 2, (rows + cols) % 2][label]
    contrast = rng.uniform(100, 200, size=(count, 1, 1))
    noise = rng.uniform(0, 40, size=(count, IMAGE, IMAGE))
    return np.clip(20 + contrast * pattern + noise, 0, 255).astype(np.uint8)


def run_tool(*args):
    result = warm_programs.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """train: 12 images per class; test: 6 per class (tools/make_tfrecords.py)."""
    from keras_vit_data import writer

    rng = np.random.default_rng(0)
    splits = {}
    for split, count in (("train", 12), ("test", 6)):
        images = np.concatenate([texture_images(rng, count, k) for k in range(NUM_CLASSES)])
        labels = np.repeat(np.arange(NUM_CLASSES), count)
        splits[split] = (len(labels), zip(images[..., None], labels))
    out = str(tmp_path_factory.mktemp("textures"))
    writer.make_tfrecords(
        (splits, [f"texture{k}" for k in range(NUM_CLASSES)], False),
        out,
        examples_per_shard=20,
        progress=False,
    )
    return out


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A trainers-style RUN directory holding a randomly initialised tiny ViT."""
    keras.utils.set_random_seed(3)
    model = keras_vit.VisionTransformer(**MODEL)
    path = tmp_path_factory.mktemp("run")
    model.save_weights(str(path / "model.weights.h5"))
    (path / "model_config.json").write_text(json.dumps(model.get_config()))
    return str(path)


def test_visualize_writes_the_four_figures(data_dir, run_dir, tmp_path):
    out = tmp_path / "figures"
    run_tool(
        "tools/visualize.py",
        f"--run_dir={run_dir}",
        f"--data_dir={data_dir}",
        f"--output_dir={out}",
        "--num_images=3",
        "--distance_images=8",
        "--num_components=6",
    )
    for name in (
        "attention_rollout",
        "attention_distance",
        "position_embedding_similarity",
        "embedding_filters",
        "patch_feature_pca",
    ):
        png = (out / f"{name}.png").read_bytes()
        assert png.startswith(b"\x89PNG") and len(png) > 2000, name
    numbers = json.loads((out / "inspect.json").read_text())
    distance = np.array(numbers["mean_attention_distance_px"])
    assert distance.shape == (2, 2) and numbers["distance_images"] == 8
    # Patch centres 4 px apart on a 4x4 grid: distances lie in [0, diagonal].
    assert (distance > 0).all() and (distance < np.hypot(12, 12)).all()
    assert len(numbers["filter_explained_variance"]) == 6
    assert len(numbers["patch_feature_explained_variance"]) == 3
    assert numbers["images"] == f"the test split of {data_dir}"


def test_the_attention_figures_name_their_images_and_units(monkeypatch, tmp_path):
    """The rollout and distance figures say which images (the split) they show, and
    the distance its unit; checked on the figures before they are saved."""
    from keras_vit_tools import figures

    titles = []

    def texts(fig, path):
        titles.append(
            [fig._suptitle.get_text() if fig._suptitle else ""]
            + [t for ax in fig.axes for t in (ax.get_title(), ax.get_ylabel(), ax.get_xlabel())]
        )
        figures.plt.close(fig)

    monkeypatch.setattr(figures, "_save", texts)
    source = "the validation split of DATA"
    images = np.zeros((2, 8, 8, 3))
    figures.attention_overlays(images, np.ones((2, 2, 2)), "x.png", None, source)
    figures.attention_distance(np.ones((2, 3)), "y.png", (8, 8), 2.0, 5, source)
    overlays, distance = titles
    assert f"2 images from {source}; each map scaled to a maximum of 1" in overlays
    assert "3 heads, 8x8 px input,\nmean over 5 images from " + source in distance
    assert "mean attention distance (pixels)" in distance


def test_images_are_read_from_files_and_tfrecords_and_a_bad_glob_is_named(data_dir, tmp_path):
    from keras_vit_tools import inspect_io

    images, labels = inspect_io.load_images(os.path.join(data_dir, "test-*.tfrecord"), (16, 16), 7)
    assert images.shape == (7, 16, 16, 3) and images.dtype == np.float32
    assert -1 <= images.min() and images.max() <= 1
    np.testing.assert_array_equal(labels, [0] * 6 + [1])  # file order, first shard first
    np.testing.assert_array_equal(images[..., 0], images[..., 2])  # grey -> RGB
    import tensorflow as tf

    pixels = (np.arange(64, dtype=np.uint8).reshape(8, 8, 1)) * 3
    (tmp_path / "a.png").write_bytes(tf.io.encode_png(pixels).numpy())
    images, labels = inspect_io.load_images(str(tmp_path / "*.png"), (8, 8), 5)
    np.testing.assert_allclose(images[0, ..., 1], pixels[..., 0] / 127.5 - 1, atol=1e-6)
    np.testing.assert_array_equal(labels, [-1])
    # A 1-channel model gets 1-channel images: the grey PNG as it was.
    grey, _ = inspect_io.load_images(str(tmp_path / "*.png"), (8, 8), 5, channels=1)
    assert grey.shape == (1, 8, 8, 1)
    np.testing.assert_allclose(grey[0, ..., 0], pixels[..., 0] / 127.5 - 1, atol=1e-6)
    with pytest.raises(FileNotFoundError, match="nothing/here"):
        inspect_io.load_images(str(tmp_path / "nothing/here/*.png"), (8, 8), 5)


def test_fewshot_evaluator_refuses_a_model_of_other_than_rgb_input(data_dir):
    from keras_vit_trainers import fewshot_evaluator
    from keras_vit_trainers.input_spec import InputSpec

    grey = keras_vit.VisionTransformer(**{**MODEL, "image_size": None}, input_shape=(16, 16, 1))
    spec = InputSpec(image_size=grey.image_size)
    evaluator = fewshot_evaluator.FewShotEvaluator(data_dir, spec, shots=[1])
    with pytest.raises(ValueError, match="takes 1-channel images; use a 3-channel model"):
        evaluator.evaluate(grey)


def test_fewshot_tool_reports_every_shot_count(data_dir, run_dir, tmp_path):
    output = tmp_path / "fewshot.json"
    result = run_tool(
        "tools/fewshot.py",
        f"--run_dir={run_dir}",
        f"--data_dir={data_dir}",
        "--shots=1,5,10",
        "--num_seeds=2",
        f"--output_json={output}",
    )
    saved = json.loads(output.read_text())
    assert set(saved["results"]) == {"1", "5", "10"}
    # The numbers name their split and unit, in the file and the printed line.
    assert (saved["train_split"], saved["test_split"]) == ("train", "test")
    assert saved["metric"].startswith("accuracy on test_split, a fraction")
    assert "few-shot accuracy on the test split (k-shot sets from train)" in result.stdout
    for k in ("1", "5", "10"):
        assert f"{k}-shot:" in result.stdout
        assert len(saved["results"][k]["per_seed"]) == 2
    # Even random ViT features tell the textures apart.
    assert saved["results"]["10"]["mean"] >= 0.9, saved["results"]


def _evaluator_context(data_dir):
    from keras_vit_trainers import evaluators, objectives
    from keras_vit_trainers.input_spec import InputSpec

    spec = InputSpec(image_size=IMAGE, num_classes=NUM_CLASSES)
    return evaluators.Context(data_dir, spec, objectives.get("classification"), None, 8)


def test_fewshot_evaluator_records_each_step_it_runs(data_dir):
    from keras_vit_trainers import evaluators

    keras.utils.set_random_seed(4)
    model = keras_vit.VisionTransformer(**MODEL)
    (fewshot,) = evaluators.build(
        {"fs": dict(type="fewshot", every=2, shots=(1, 3), num_seeds=2)},
        _evaluator_context(data_dir),
    )
    assert fewshot.every == 2  # the trainer's loop runs it at steps 2, 4, ...
    for step in (2, 4):  # as the loop calls it
        scalars = evaluators.evaluate(fewshot, model, step)
        assert scalars == fewshot.scalars[step]
    assert sorted(fewshot.history) == [2, 4]
    for results in fewshot.history.values():
        assert set(results) == {1, 3}
        assert all(0 <= r["mean"] <= 1 and len(r["per_seed"]) == 2 for r in results.values())
    assert fewshot.scalars[4] == {
        "1shot": fewshot.history[4][1]["mean"],
        "3shot": fewshot.history[4][3]["mean"],
    }


def test_evaluators_from_config(data_dir):
    from keras_vit_configs import common
    from keras_vit_trainers import evaluators

    context = _evaluator_context(data_dir)
    evals = {"test": common.classification_eval(), "fewshot": common.fewshot_eval()}
    made = evaluators.build(evals, context)
    assert [e.name for e in made] == ["test"]  # few-shot is off (every=-1) by default
    evals["fewshot"].every = 10
    evals["fewshot"].shots = (1, 2)
    made = {e.name: e for e in evaluators.build(evals, context)}
    assert made["fewshot"].every == 10 and made["fewshot"].evaluator.options["shots"] == (1, 2)
    with pytest.raises(ValueError, match="config.evals.fewshot: .*unknown option"):
        evaluators.build({"fewshot": dict(type="fewshot", every=1, shot=5)}, context)
    with pytest.raises(ValueError, match=r"config.evals.x.type='nope': expected one of"):
        evaluators.build({"x": dict(type="nope")}, context)
    assert evaluators.build({"v": common.classification_eval("validation")}, context) == []


@pytest.mark.parametrize(
    "preprocessing",
    [
        None,
        {"mean": [0.5] * 3, "std": [0.5] * 3},
        {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]},
    ],
)
def test_the_figures_feed_a_model_its_own_input_normalisation(preprocessing):
    """tools/visualize.py shows images in [-1, 1] and feeds the model its own input
    normalisation (a DINOv2 checkpoint's ImageNet mean/std); SigLIP's 0.5/0.5 is the
    authors' [-1, 1] scaling."""
    from keras_vit_tools import inspect_io

    model = tiny_vit(preprocessing=preprocessing)
    images = np.linspace(-1, 1, 2 * 16 * 16 * 3, dtype="float32").reshape(2, 16, 16, 3)
    inputs = inspect_io.model_inputs(model, images)
    mean, std = (0.5, 0.5) if preprocessing is None else map(np.array, preprocessing.values())
    np.testing.assert_allclose(inputs, ((images + 1) / 2 - mean) / std, atol=2e-6)
