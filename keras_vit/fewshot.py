"""Few-shot linear evaluation (paper §4.1 "Metrics"), the big_vision recipe.

A closed-form L2-regularised least-squares classifier on frozen features, as
big_vision's `evaluators/fewshot_lsr.py` (read at commit 1475d53). What is
matched here, step by step:

- features are standardised per dimension with the few-shot train set's mean
  and std (`std + 1e-5`), and the test features with the same statistics;
- a constant feature of value 100 (`BIAS_CONSTANT`) is appended for the bias,
  large so that it is almost unregularised;
- targets are `2 * onehot - 1`, in {-1, 1};
- the weights are `(x^T x + l2 I)^-1 x^T y` when N >= D, else
  `x^T (x x^T + l2 I)^-1 y`, via the eigendecomposition of x^T x / x x^T;
  prediction is the argmax of x_test @ w; l2 = 2**10 (the ViT configs' value);
- for each seed, `numpy.random.default_rng(seed)` permutes the indices of each
  class once and each shot count takes the first `shots` of every class (so the
  5-shot set contains the 1-shot set); a class with fewer examples than `shots`
  contributes what it has; seeds are 0 .. num_seeds-1.

big_vision reports each seed separately; `evaluate` also gives mean and std.
Everything here is numpy; `extract_features` runs a Keras model on any backend.

Only the k-shot images matter on the train side: `needed_indices` gives the union of
every seed's k-shot sets (at most max(shots) x classes x seeds indices), computed from
the labels alone, and `evaluate(..., train_indices=needed)` takes train features
for just those examples (the same k-shot sets, the same classifiers, the same
accuracies as with features of the whole split).
"""

import keras
import numpy as np

from keras_vit.layers.pooling import TokenPooling

BIAS_CONSTANT = 100.0
DEFAULT_L2 = 2.0**10
DEFAULT_SHOTS = (1, 5, 10, 25)
REPRESENTATIONS = ("pre_logits", "token", "gap")


# -- Features ---------------------------------------------------------------------


def feature_model(model, representation="pre_logits"):
    """A `keras.Model` sharing `model`'s weights that maps images to features.

    Args:
        model: a `keras_vit.VisionTransformer`.
        representation: 'pre_logits': what feeds the head (the pre_logits layer's
            output when the model has one, else the pooled representation —
            big_vision's `pre_logits`); 'token': the class token's output after the
            final LayerNorm (token models only); 'gap': the mean over the patch
            tokens after the final LayerNorm.
    Returns:
        a model (B, H, W, 3) -> (B, features).
    """
    if representation not in REPRESENTATIONS:
        raise ValueError(
            f"representation must be one of {REPRESENTATIONS}, got {representation!r}."
        )
    layer_names = {layer.name for layer in model.layers}
    if representation == "pre_logits":
        name = "pre_logits" if "pre_logits" in layer_names else "pool"
        if name not in layer_names:
            raise ValueError(
                f"representation='pre_logits': {model.name} has neither a pre_logits nor a "
                "pooled output (a pooling=None model returns the feature map); use "
                "representation='gap' (or 'token' for a class-token model)."
            )
        output = model.get_layer(name).output
    else:
        encoder = model.get_layer("Transformer")
        prefix = encoder.num_output_prefix_tokens  # class token, registers
        if representation == "token" and not encoder.num_prefix_tokens:
            raise ValueError(
                "representation='token': this model has no class token "
                "(classifier='gap'); use 'gap' or 'pre_logits'."
            )
        tokens = encoder.output
        if representation == "gap" and prefix:
            tokens = PatchTokens(prefix, name="patch_tokens")(tokens)
        output = TokenPooling(representation, name=f"{representation}_features")(tokens)
    return keras.Model(model.inputs[0], output, name=f"{model.name}_{representation}_features")


@keras.saving.register_keras_serializable(package="keras_vit")
class PatchTokens(keras.layers.Layer):
    """Drops the prefix (class) tokens: (B, prefix + N, D) -> (B, N, D)."""

    def __init__(self, num_prefix_tokens=1, **kwargs):
        super().__init__(**kwargs)
        self.num_prefix_tokens = int(num_prefix_tokens)

    def call(self, tokens):
        return tokens[:, self.num_prefix_tokens :]

    def compute_output_shape(self, input_shape):
        batch, tokens, hidden = input_shape
        return (batch, None if tokens is None else tokens - self.num_prefix_tokens, hidden)

    def get_config(self):
        config = super().get_config()
        config["num_prefix_tokens"] = self.num_prefix_tokens
        return config


def extract_features(model, batches, representation="pre_logits"):
    """Runs the frozen feature model over `batches`.

    Args:
        model: a `keras_vit.VisionTransformer`.
        batches: iterable of (images, labels) or (images, labels, weights); images
            (B, H, W, 3) in [-1, 1], labels (B,) ints; examples of weight 0
            (padding) are dropped.
        representation: see `feature_model`.
    Returns:
        features (N, F) float32 and labels (N,) int64.
    """
    features_model = feature_model(model, representation)
    features, labels = [], []
    for batch in batches:
        images, batch_labels = batch[0], keras.ops.convert_to_numpy(batch[1])
        out = keras.ops.convert_to_numpy(features_model(images, training=False))
        if len(batch) > 2:
            keep = keras.ops.convert_to_numpy(batch[2]) > 0
            out, batch_labels = out[keep], batch_labels[keep]
        features.append(out.astype(np.float32))
        labels.append(np.asarray(batch_labels, np.int64).reshape(-1))
    if not features:
        raise ValueError("extract_features: no batches.")
    return np.concatenate(features), np.concatenate(labels)


# -- The closed-form classifier --------------------------------------------------


class RidgeClassifier:
    """L2-regularised least squares on whitened features plus a bias feature,
    targets 2*onehot-1 (big_vision `_precompute_cache` / `_eig_fewshot_acc_fn`).

    Args:
        features: (N, D) training features.
        labels: (N,) ints in [0, num_classes).
        num_classes: C.
        l2: the ridge strength.
    """

    def __init__(self, features, labels, num_classes, l2=DEFAULT_L2):
        x = np.asarray(features, np.float64)
        y = np.asarray(labels).reshape(-1)
        if x.ndim != 2 or len(x) != len(y):
            raise ValueError(
                f"RidgeClassifier: features {x.shape} and labels {y.shape} must be (N, D) and (N,)."
            )
        if len(y) and (y.min() < 0 or y.max() >= num_classes):
            raise ValueError(
                f"RidgeClassifier: labels must be in [0, {num_classes}), got "
                f"[{y.min()}, {y.max()}]."
            )
        self.mean = x.mean(axis=0, keepdims=True)
        self.std = x.std(axis=0, keepdims=True) + 1e-5
        x = self._inputs(x)
        targets = 2.0 * np.eye(num_classes)[y] - 1.0
        if len(x) >= x.shape[1]:
            eigs, q = np.linalg.eigh(x.T @ x)
            lhs, rhs = q, q.T @ (x.T @ targets)
        else:
            eigs, q = np.linalg.eigh(x @ x.T)
            lhs, rhs = x.T @ q, q.T @ targets
        self.weights = (lhs / (eigs + l2)[None, :]) @ rhs  # (D + 1, C)

    def _inputs(self, x):
        x = (np.asarray(x, np.float64) - self.mean) / self.std
        return np.pad(x, ((0, 0), (0, 1)), constant_values=BIAS_CONSTANT)

    def predict(self, features):
        """(M, D) features -> (M,) predicted classes."""
        return np.argmax(self._inputs(features) @ self.weights, axis=1)

    def accuracy(self, features, labels):
        return float(np.mean(self.predict(features) == np.asarray(labels).reshape(-1)))


def fewshot_indices(labels, shots, num_classes, seed):
    """{shots: indices} of the few-shot train sets for one seed: each class's
    indices permuted once with `default_rng(seed)`, the first `shots` taken."""
    labels = np.asarray(labels).reshape(-1)
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.where(labels == c)[0]) for c in range(num_classes)]
    return {k: np.concatenate([idx[:k] for idx in per_class]) for k in shots}


def needed_indices(labels, shots, num_classes, num_seeds):
    """The train examples whose features `evaluate` reads: the sorted union of the
    k-shot sets of every k in `shots` and seeds 0 .. num_seeds-1
    (`fewshot_indices`), from the labels alone.

    Args:
        labels: (N,) ints, the labels of the whole train split.
        shots, num_classes, num_seeds: as for `evaluate`.
    Returns:
        (M,) int64 indices into the train split, sorted and unique, M <=
        max(shots) * num_classes * num_seeds. Features computed for these
        examples, in this order, are `evaluate`'s `train_features` with
        `train_indices` = these indices.
    """
    labels = np.asarray(labels).reshape(-1)
    shots, num_seeds = _check_shots_and_seeds(shots, num_seeds)
    draws = [
        idx
        for seed in range(num_seeds)
        for idx in fewshot_indices(labels, shots, num_classes, seed).values()
    ]
    return np.unique(np.concatenate(draws).astype(np.int64))


def _check_shots_and_seeds(shots, num_seeds):
    if num_seeds < 1:
        raise ValueError(f"num_seeds must be >= 1, got {num_seeds}.")
    shots = tuple(int(k) for k in shots)
    if not shots or min(shots) < 1:
        raise ValueError(f"shots must be positive integers, got {shots}.")
    return shots, int(num_seeds)


def _feature_rows(train_indices, num_train):
    """A function mapping train-split indices to rows of the subset's features."""
    if train_indices is None:
        return lambda idx: idx
    train_indices = np.asarray(train_indices, np.int64).reshape(-1)
    if len(train_indices) and (train_indices.min() < 0 or train_indices.max() >= num_train):
        raise ValueError(
            f"evaluate: train_indices must be in [0, {num_train}) (the train "
            f"labels), got [{train_indices.min()}, {train_indices.max()}]."
        )
    row_of = np.full(num_train, -1, np.int64)
    row_of[train_indices] = np.arange(len(train_indices))
    if np.count_nonzero(row_of >= 0) != len(train_indices):
        raise ValueError("evaluate: train_indices has repeated indices.")

    def rows(idx):
        found = row_of[idx]
        if (found < 0).any():
            raise ValueError(
                f"evaluate: the k-shot sets need train examples "
                f"{idx[found < 0][:5].tolist()}..., which are not in "
                "train_indices (use needed_indices)."
            )
        return found

    return rows


def evaluate(
    train_features,
    train_labels,
    test_features,
    test_labels,
    shots=DEFAULT_SHOTS,
    num_seeds=3,
    l2=DEFAULT_L2,
    num_classes=None,
    train_indices=None,
):
    """Few-shot accuracies on `test` of ridge classifiers fit on k-shot subsets
    of `train`, for each k in `shots` and seeds 0 .. num_seeds-1.

    Args:
        train_features, test_features: (N, D) and (M, D) frozen features; with
            `train_indices`, train_features is (len(train_indices), D): row j
            holds the features of train example train_indices[j].
        train_labels, test_labels: (N,) and (M,) ints; train_labels always cover
            the whole train split (the k-shot sets are drawn from them).
        shots: examples per class.
        num_seeds: number of random k-shot draws.
        l2: ridge strength (big_vision: 2**10).
        num_classes: default: 1 + the largest label seen.
        train_indices: None (features of every train example) or the indices the
            train features belong to, e.g. `needed_indices(train_labels, shots,
            num_classes, num_seeds)`; it must contain every k-shot index.
    Returns:
        {k: {'mean': float, 'std': float, 'per_seed': [acc, ...]}}, accuracies
        in [0, 1], std over seeds (population, ddof=0). The same with and
        without `train_indices` for the same features.
    """
    train_features, test_features = np.asarray(train_features), np.asarray(test_features)
    train_labels = np.asarray(train_labels).reshape(-1)
    test_labels = np.asarray(test_labels).reshape(-1)
    num_rows = len(train_labels) if train_indices is None else len(train_indices)
    if len(train_features) != num_rows or len(test_features) != len(test_labels):
        what = "labels" if train_indices is None else "train_indices"
        raise ValueError(
            f"evaluate: {len(train_features)} train features vs "
            f"{num_rows} {what}, {len(test_features)} test features "
            f"vs {len(test_labels)} labels."
        )
    if num_classes is None:
        num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    shots, num_seeds = _check_shots_and_seeds(shots, num_seeds)
    rows = _feature_rows(train_indices, len(train_labels))
    per_seed = {k: [] for k in shots}
    for seed in range(num_seeds):
        for k, idx in fewshot_indices(train_labels, shots, num_classes, seed).items():
            classifier = RidgeClassifier(
                train_features[rows(idx)], train_labels[idx], num_classes, l2
            )
            per_seed[k].append(classifier.accuracy(test_features, test_labels))
    return {
        k: {"mean": float(np.mean(a)), "std": float(np.std(a)), "per_seed": a}
        for k, a in per_seed.items()
    }


def format_results(results):
    """One line per shot count: '10-shot: 83.21% ± 0.40 (3 seeds)'."""
    return "\n".join(
        f"{k:>3}-shot: {100 * r['mean']:.2f}% ± {100 * r['std']:.2f} ({len(r['per_seed'])} seeds)"
        for k, r in sorted(results.items())
    )
