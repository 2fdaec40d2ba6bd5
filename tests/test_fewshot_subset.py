"""trainers/fewshot_evaluator.FewShotEvaluator reads only the k-shot train images
through the model, with the same k-shot sets, features and accuracies as extracting
the whole train split (the reference computed here with `features` + evaluate)."""

import os

import keras
import numpy as np
import pytest
import trainer_testing as testing

import keras_vit
from keras_vit import fewshot

NUM_CLASSES = 4
SHOTS = (1, 5)
NUM_SEEDS = 3
N_TRAIN, N_TEST = 128, 64


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    """train: 128 records in 4 shards of 32; test: 64 (tests/trainer_testing.py)."""
    out = str(tmp_path_factory.mktemp("fewshot_subset"))
    testing.make_tiny_data(
        out, n_train=N_TRAIN, n_test=N_TEST, per_shard=32, num_classes=NUM_CLASSES
    )
    return out


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(7)
    return keras_vit.VisionTransformer(
        image_size=28,
        patch_size=7,
        hidden_size=16,
        mlp_dim=32,
        num_heads=2,
        num_layers=1,
        num_classes=NUM_CLASSES,
    )


def evaluator(data_dir, **options):
    from keras_vit_trainers import fewshot_evaluator

    options = {
        "shots": SHOTS,
        "num_seeds": NUM_SEEDS,
        "batch_size": 16,
        "max_train_examples": None,
        **options,
    }
    from keras_vit_trainers.input_spec import InputSpec

    return fewshot_evaluator.FewShotEvaluator(data_dir, InputSpec(image_size=28), **options)


def count_images(monkeypatch):
    """Wraps keras_vit.fewshot.feature_model so that every batch through it is counted."""
    counts = []
    real = fewshot.feature_model

    def counting(vit, representation="pre_logits"):
        inner = real(vit, representation)

        def call(images, training=False):
            counts.append(int(images.shape[0]))
            return inner(images, training=training)

        return call

    monkeypatch.setattr(fewshot, "feature_model", counting)
    return counts


# 80: the first 80 records, two full shards and part of the third.
@pytest.mark.parametrize("max_train_examples", [None, 80])
@pytest.mark.parametrize("representation", ["pre_logits", "gap"])
def test_subset_gives_the_full_extractions_kshot_sets_features_and_accuracies(
    data_dir, model, max_train_examples, representation
):
    ev = evaluator(data_dir, max_train_examples=max_train_examples, representation=representation)
    full_train = ev.features(model, "train", max_train_examples)
    test = ev.features(model, "test", None)
    reference = fewshot.evaluate(
        *full_train, *test, shots=SHOTS, num_seeds=NUM_SEEDS, num_classes=NUM_CLASSES
    )

    labels, needed = ev.train_draws()
    np.testing.assert_array_equal(labels, full_train[1])  # same index i = same example
    assert len(labels) == (max_train_examples or N_TRAIN)
    for seed in range(NUM_SEEDS):
        ours = fewshot.fewshot_indices(labels, SHOTS, NUM_CLASSES, seed)
        theirs = fewshot.fewshot_indices(full_train[1], SHOTS, NUM_CLASSES, seed)
        for k in SHOTS:
            np.testing.assert_array_equal(ours[k], theirs[k])
            assert set(ours[k]) <= set(needed)

    features, train_labels, indices = ev.train_features(model)
    np.testing.assert_array_equal(indices, needed)
    np.testing.assert_array_equal(train_labels, full_train[1])
    # The same images through the same model, only in other batches (16 of the k-shot
    # images vs 16 consecutive records): float32 kernels may sum in another order for
    # another batch, a few ulps apart, so compare within 1e-5 of the largest feature.
    bound = 1e-5 * np.abs(full_train[0]).max()
    np.testing.assert_allclose(features, full_train[0][needed], rtol=0, atol=bound)

    results = ev.evaluate(model)
    assert sorted(results) == sorted(reference)
    for k in SHOTS:
        assert results[k]["per_seed"] == reference[k]["per_seed"], (k, results, reference)
        assert results[k]["mean"] == pytest.approx(reference[k]["mean"])


def test_only_the_kshot_images_go_through_the_model(data_dir, model, monkeypatch):
    ev = evaluator(data_dir)
    counts = count_images(monkeypatch)
    _, needed = ev.train_draws()  # labels only: nothing through the model
    assert not counts
    features, _, _ = ev.train_features(model)
    assert sum(counts) == len(needed) == len(features)
    assert sum(counts) <= max(SHOTS) * NUM_CLASSES * NUM_SEEDS < N_TRAIN
    assert ev.examples_extracted["train"] == len(needed)

    counts.clear()
    ev.evaluate(model)  # the test split is still read in full (64 = 4 batches of 16)
    assert sum(counts) == len(needed) + N_TEST
    assert ev.examples_extracted == {"train": len(needed), "test": N_TEST}


def test_an_unreadable_kshot_image_falls_back_to_the_whole_split(tmp_path, model, monkeypatch):
    """A train record whose image does not decode: eval_dataset gives it weight 0, it
    has no features (later indices shift), so the evaluator extracts the whole split."""
    from keras_vit_data import image_checks, writer

    # Records from another writer: make_tfrecords itself skips images that do not decode.
    monkeypatch.setattr(image_checks, "image_problem", lambda encoded, max_pixels: None)
    images, labels = testing.synthetic_split(40, seed=0, num_classes=3)
    encoded = [image_checks.encode_png(i) for i in images]
    # One example of class 3 and it is not an image: every k-shot set holds it.
    encoded.insert(17, b"not an image")
    labels = np.insert(labels, 17, 3)
    test_images, test_labels = testing.synthetic_split(20, seed=1, num_classes=4)
    splits = {
        "train": (len(labels), zip(encoded, labels)),
        "test": (len(test_labels), zip(test_images, test_labels)),
    }
    data = str(tmp_path / "data")
    writer.make_tfrecords(
        (splits, [f"c{i}" for i in range(4)], False), data, examples_per_shard=16, progress=False
    )
    ev = evaluator(data)
    train_labels, needed = ev.train_draws()
    assert len(train_labels) == 41 and 17 in needed  # labels parse: the record counts
    features, got_labels, indices = ev.train_features(model)
    assert indices is None  # fell back
    full = ev.features(model, "train")
    assert len(full[1]) == 40
    np.testing.assert_array_equal(got_labels, full[1])
    np.testing.assert_array_equal(features, full[0])
    test = ev.features(model, "test")
    reference = fewshot.evaluate(
        *full, *test, shots=SHOTS, num_seeds=NUM_SEEDS, num_classes=NUM_CLASSES
    )
    assert ev.evaluate(model) == reference
    assert ev.examples_extracted["train"] == 40  # from then on the whole split, at once


def test_labels_are_read_without_the_fast_path_too(data_dir):
    """read_labels' per-record path (used when a batch does not parse) gives the same."""
    from keras_vit_trainers import fewshot_evaluator, input_pipeline

    info = input_pipeline.get_split(data_dir, "train")
    fast = fewshot_evaluator.read_labels(info)
    with (
        open(os.devnull, "w") as devnull,
        fewshot_evaluator.console.Progress(
            info.num_examples, "labels", unit="record", stream=devnull
        ) as bar,
    ):
        slow = fewshot_evaluator._labels_per_record(info, 50, bar)
    for a, b in zip(fast, slow):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(fast[0], np.arange(N_TRAIN))
