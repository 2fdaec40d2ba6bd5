"""keras_vit.fewshot: the big_vision ridge classifier, k-shot draws, features."""

import keras
import numpy as np
import pytest
from tiny_models import tiny_vit

from keras_vit import fewshot


def clusters(rng, centres, per_class, spread):
    """Gaussian clusters around `centres`: linearly separable when spread is small."""
    labels = np.repeat(np.arange(len(centres)), per_class)
    return centres[labels] + rng.normal(size=(len(labels), centres.shape[1])) * spread, labels


def direct_ridge_weights(x, labels, num_classes, l2):
    """The same classifier solved directly, independently of the eigen route."""
    mean, std = x.mean(0), x.std(0) + 1e-5
    z = np.concatenate([(x - mean) / std, np.full((len(x), 1), 100.0)], axis=1)
    targets = 2.0 * (labels[:, None] == np.arange(num_classes)) - 1.0
    return np.linalg.solve(z.T @ z + l2 * np.eye(z.shape[1]), z.T @ targets)


@pytest.mark.parametrize("num_points", [6, 40])  # fewer and more points than dims
def test_ridge_classifier_matches_the_direct_solution(rng, num_points):
    x = rng.normal(size=(num_points, 12)) * rng.uniform(0.1, 5, size=12) + 3
    labels = np.arange(num_points) % 3
    classifier = fewshot.RidgeClassifier(x, labels, 3, l2=7.0)
    np.testing.assert_allclose(
        classifier.weights, direct_ridge_weights(x, labels, 3, 7.0), rtol=1e-8, atol=1e-10
    )
    test = rng.normal(size=(5, 12))
    z = np.concatenate([(test - x.mean(0)) / (x.std(0) + 1e-5), np.full((5, 1), 100.0)], 1)
    np.testing.assert_array_equal(
        classifier.predict(test), np.argmax(z @ direct_ridge_weights(x, labels, 3, 7.0), 1)
    )


def test_separable_features_give_about_100_percent(rng):
    centres = rng.normal(size=(5, 16)) * 3
    train = clusters(rng, centres, per_class=40, spread=0.3)
    test = clusters(rng, centres, per_class=100, spread=0.3)
    results = fewshot.evaluate(*train, *test, shots=(1, 5, 10, 25), num_seeds=3)
    assert set(results) == {1, 5, 10, 25}
    for k in (5, 10, 25):
        assert results[k]["mean"] >= 0.99, (k, results[k])
    assert results[1]["mean"] >= 0.9, results[1]


def test_random_labels_give_chance(rng):
    x = rng.normal(size=(400, 16))
    labels = rng.integers(0, 4, size=400)
    test_x, test_labels = rng.normal(size=(4000, 16)), rng.integers(0, 4, size=4000)
    results = fewshot.evaluate(x, labels, test_x, test_labels, shots=(5, 25), num_seeds=4)
    for k, r in results.items():
        assert abs(r["mean"] - 0.25) < 0.04, (k, r)


def test_evaluate_reports_mean_and_std_over_seeds(rng):
    train = clusters(rng, rng.normal(size=(3, 8)), per_class=30, spread=3.0)
    results = fewshot.evaluate(*train, *train, shots=(2,), num_seeds=5)
    per_seed = results[2]["per_seed"]
    assert len(per_seed) == 5 and len(set(per_seed)) > 1  # seeds draw different sets
    assert results[2]["mean"] == pytest.approx(np.mean(per_seed))
    assert results[2]["std"] == pytest.approx(np.std(per_seed))
    assert "2-shot" in fewshot.format_results(results)


def test_fewshot_indices_are_balanced_nested_and_seeded():
    labels = np.repeat(np.arange(4), 30)[np.random.default_rng(0).permutation(120)]
    draws = fewshot.fewshot_indices(labels, (1, 5, 10), num_classes=4, seed=3)
    for k, idx in draws.items():
        np.testing.assert_array_equal(np.bincount(labels[idx], minlength=4), [k] * 4)
    assert set(draws[1]) <= set(draws[5]) <= set(draws[10])
    again = fewshot.fewshot_indices(labels, (5,), num_classes=4, seed=3)
    np.testing.assert_array_equal(again[5], draws[5])
    other = fewshot.fewshot_indices(labels, (5,), num_classes=4, seed=4)
    assert set(other[5]) != set(draws[5])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="labels must be in"):
        fewshot.RidgeClassifier(np.ones((3, 2)), [0, 1, 5], num_classes=3)
    with pytest.raises(ValueError, match="3 train features vs 2 labels"):
        fewshot.evaluate(np.ones((3, 2)), [0, 1], np.ones((2, 2)), [0, 1])
    with pytest.raises(ValueError, match="shots"):
        fewshot.evaluate(np.ones((2, 2)), [0, 1], np.ones((2, 2)), [0, 1], shots=(0,))


# -- features from a model -----------------------------------------------------------


def tiny_model(classifier, **kwargs):
    """tests/tiny_models.py's ViT on 8 px (2x2 patches), 12 wide, 3 classes."""
    return tiny_vit(
        image_size=8, hidden_size=12, mlp_dim=16, num_classes=3, classifier=classifier, **kwargs
    )


def test_pre_logits_features_are_what_the_head_reads():
    model = tiny_model("token", representation_size=6)
    head = model.get_layer("head")
    head.kernel.assign(np.random.default_rng(0).normal(size=(6, 3)).astype("float32"))
    images = np.random.default_rng(1).uniform(-1, 1, (5, 8, 8, 3)).astype("float32")
    features, labels = fewshot.extract_features(model, [(images, np.arange(5))])
    assert features.shape == (5, 6)
    logits = keras.ops.convert_to_numpy(model(images))
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in (head.kernel, head.bias))
    np.testing.assert_allclose(features @ kernel + bias, logits, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(labels, np.arange(5))


def test_gap_features_of_a_token_model_average_the_patch_tokens():
    model = tiny_model("token")
    images = np.random.default_rng(2).uniform(-1, 1, (3, 8, 8, 3)).astype("float32")
    tokens = keras.Model(model.inputs[0], model.get_layer("Transformer").output)(images)
    tokens = keras.ops.convert_to_numpy(tokens)
    gap, _ = fewshot.extract_features(model, [(images, [0, 1, 2])], "gap")
    token, _ = fewshot.extract_features(model, [(images, [0, 1, 2])], "token")
    np.testing.assert_allclose(gap, tokens[:, 1:].mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(token, tokens[:, 0], rtol=1e-6)


def test_padding_is_dropped_and_token_features_need_a_class_token():
    model = tiny_model("gap")
    images = np.zeros((4, 8, 8, 3), "float32")
    features, labels = fewshot.extract_features(
        model, [(images, np.array([0, 1, 2, 0]), np.array([1.0, 1.0, 0.0, 1.0]))]
    )
    assert features.shape == (3, 12)
    np.testing.assert_array_equal(labels, [0, 1, 0])
    with pytest.raises(ValueError, match="no class token"):
        fewshot.feature_model(model, "token")


def test_a_feature_map_model_is_told_which_representation_it_has():
    model = tiny_model("token", include_top=False, pooling=None)
    with pytest.raises(ValueError, match="neither a pre_logits nor a pooled output"):
        fewshot.feature_model(model)
    images = np.zeros((2, 8, 8, 3), "float32")
    features, _ = fewshot.extract_features(model, [(images, [0, 1])], "gap")
    assert features.shape == (2, 12)


# -- only the k-shot train examples ------------------------------------------------


def test_needed_indices_are_the_union_of_every_seeds_kshot_sets(rng):
    labels = rng.integers(0, 5, size=300)
    labels[labels == 4] = 3  # class 4 empty: contributes nothing
    needed = fewshot.needed_indices(labels, (1, 5, 10), num_classes=5, num_seeds=3)
    union = set()
    for seed in range(3):
        for idx in fewshot.fewshot_indices(labels, (1, 5, 10), 5, seed).values():
            union |= set(idx.tolist())
    assert needed.tolist() == sorted(union)
    assert needed.dtype == np.int64 and len(needed) <= 10 * 5 * 3


def test_evaluate_on_the_needed_features_equals_evaluate_on_all(rng):
    train = clusters(rng, rng.normal(size=(4, 8)), per_class=40, spread=2.0)
    test = clusters(rng, rng.normal(size=(4, 8)), per_class=20, spread=2.0)
    order = rng.permutation(160)
    train = train[0][order], train[1][order]
    full = fewshot.evaluate(*train, *test, shots=(1, 3, 8), num_seeds=3)
    needed = fewshot.needed_indices(train[1], (1, 3, 8), num_classes=4, num_seeds=3)
    assert len(needed) < 160
    subset = fewshot.evaluate(
        train[0][needed], train[1], *test, shots=(1, 3, 8), num_seeds=3, train_indices=needed
    )
    assert subset == full
    # Any order of the rows works as long as train_indices says which is which.
    shuffled = rng.permutation(len(needed))
    again = fewshot.evaluate(
        train[0][needed[shuffled]],
        train[1],
        *test,
        shots=(1, 3, 8),
        num_seeds=3,
        train_indices=needed[shuffled],
    )
    for k in full:
        np.testing.assert_allclose(again[k]["per_seed"], full[k]["per_seed"])


def test_evaluate_names_missing_train_indices():
    labels = np.arange(20) % 2
    features = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(ValueError, match="not in train_indices"):
        fewshot.evaluate(
            features[:2], labels, features, labels, shots=(5,), num_seeds=1, train_indices=[0, 1]
        )
    with pytest.raises(ValueError, match="3 train features vs 2 train_indices"):
        fewshot.evaluate(features[:3], labels, features, labels, train_indices=[0, 1])
