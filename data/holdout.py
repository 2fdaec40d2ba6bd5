"""A validation split held out of `train`, stratified and deterministic
(tools/make_tfrecords.py --holdout=FRACTION): model selection then never looks at test.

Each class keeps `round(fraction * count)` of its images for validation, chosen by a
permutation seeded with (seed, class index), so the split depends on the seed and on each
class's own files only: adding images to one class leaves the others' split unchanged. A
class of one image keeps it for training; any class of two or more keeps at least one
image in each split.
"""

import logging

import numpy as np

log = logging.getLogger("tools")

# Above this ratio of the largest to the smallest class the data set is called imbalanced.
IMBALANCE_RATIO = 10
# Below this many validation images a class's validation accuracy is mostly noise.
FEW_VALIDATION_IMAGES = 5


def check_fraction(fraction):
    """`fraction` as a float in (0, 1); ValueError naming --holdout otherwise."""
    try:
        value = float(fraction)
    except (TypeError, ValueError):
        value = None
    if value is None or not 0.0 < value < 1.0:
        raise ValueError(f"--holdout={fraction}: expected a fraction between 0 and 1, e.g. 0.1")
    return value


def split(labels, num_classes, fraction, seed=0):
    """(train indices, validation indices) into `labels` (N,) ints in [0, num_classes),
    each sorted; stratified as the module docstring says."""
    fraction = check_fraction(fraction)
    labels = np.asarray(labels, np.int64)
    train, validation = [], []
    for c in range(num_classes):
        members = np.flatnonzero(labels == c)
        n = len(members)
        take = int(round(fraction * n))
        if n >= 2:
            take = min(max(take, 1), n - 1)
        else:
            take = 0
        order = np.random.default_rng([int(seed), c]).permutation(n)
        validation.extend(members[order[:take]].tolist())
        train.extend(members[order[take:]].tolist())
    return sorted(train), sorted(validation)


def describe(labels, train, validation, class_names, fraction, seed):
    """The manifest's record of the split: fraction, seed, class names and per-class
    counts of each part; logs one line for an imbalanced data set and one naming the
    classes with few validation images."""
    labels = np.asarray(labels, np.int64)
    k = len(class_names)
    train_counts = np.bincount(labels[train], minlength=k).tolist()
    validation_counts = np.bincount(labels[validation], minlength=k).tolist()
    totals = [a + b for a, b in zip(train_counts, validation_counts)]
    present = [t for t in totals if t]
    if present and max(present) > IMBALANCE_RATIO * min(present):
        big, small = int(np.argmax(totals)), int(np.argmin([t or np.inf for t in totals]))
        log.warning(
            "imbalanced classes: %r has %d images, %r %d (over %dx); accuracy alone will "
            "hide the small ones",
            class_names[big],
            totals[big],
            class_names[small],
            totals[small],
            IMBALANCE_RATIO,
        )
    few = [
        f"{name} ({count})"
        for name, count in zip(class_names, validation_counts)
        if count < FEW_VALIDATION_IMAGES
    ]
    if few:
        log.warning(
            "classes with fewer than %d validation images: %s",
            FEW_VALIDATION_IMAGES,
            ", ".join(few),
        )
    return {
        "from": "train",
        "fraction": float(fraction),
        "seed": int(seed),
        "class_names": list(class_names),
        "train_per_class": train_counts,
        "validation_per_class": validation_counts,
    }
