"""Mixup (Zhang et al. 2017) and CutMix (Yun et al. 2019) on batches, as AugReg's
big_vision runs Mixup (settings.py has the alphas of its settings).

Mixup / CutMix (`mix_batch`), on each per-replica batch, after the objective's
`map_batch` made the labels one-hot / multi-hot floats:
  * Mixup (big_vision `utils.mixup` with n=2, fold_in=None): one ratio per batch,
    lambda ~ Beta(alpha, alpha) folded to max(lambda, 1 - lambda) (big_vision
    sorts the Dirichlet weights, so each example keeps its own image as the
    larger part); images and labels become lambda * x + (1 - lambda) * roll(x, 1).
  * CutMix (Yun et al. 2019): lambda ~ Beta(alpha, alpha); one box per batch, of
    side floor(sqrt(1 - lambda) * H) x floor(sqrt(1 - lambda) * W) centred at a
    uniform pixel and clipped to the image, is pasted from roll(x, 1); labels
    are mixed by the box's actual area fraction a: (1 - a) * y + a * roll(y, 1).
  * Both on: each batch uses one of the two, CutMix with probability 0.5
    (timm's `switch_prob=0.5`).
  * The batch seed is stateless_fold_in([seed, MIX_KEY], step): one ratio/box
    per global step, the same on every replica (big_vision's fold_in=None),
    each replica mixing within its own batch (big_vision mixes per device).
"""

import tensorflow as tf

from keras_vit_trainers.augment.randaugment import paste

MIX_KEY = 0x6D6978  # keeps batch (mixing) seeds apart from per-example seeds


def mix_seed(seed, step):
    """The per-batch seed, int64 [2]: a pure function of (pipeline seed, step)."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.constant(MIX_KEY, tf.int64)])
    return tf.random.experimental.stateless_fold_in(base, tf.cast(step, tf.int64))


def sample_beta(seed, alpha):
    """lambda ~ Beta(alpha, alpha) as a float32 scalar (ratio of two Gammas)."""
    g = tf.random.stateless_gamma([2], seed, alpha=tf.constant(alpha, tf.float64), dtype=tf.float64)
    total = g[0] + g[1]
    return tf.cast(tf.where(total > 0, g[0] / tf.where(total > 0, total, 1.0), 0.5), tf.float32)


def mixup(images, labels, lam):
    """lam * x + (1 - lam) * roll(x, 1) for images (B, H, W, C) and labels (B, K)."""

    def mix(x):
        return lam * x + (1.0 - lam) * tf.roll(x, 1, axis=0)

    return mix(images), mix(labels)


def cutmix_box(lam, height, width, seed):
    """CutMix box for mixing ratio `lam`: (y1, y2, x1, x2) int32, clipped."""
    cut = tf.sqrt(1.0 - lam)
    cut_h = tf.cast(tf.floor(cut * tf.cast(height, tf.float32)), tf.int32)
    cut_w = tf.cast(tf.floor(cut * tf.cast(width, tf.float32)), tf.int32)
    seeds = tf.random.experimental.stateless_split(seed, 2)
    cy = tf.random.stateless_uniform([], seeds[0], 0, height, tf.int32)
    cx = tf.random.stateless_uniform([], seeds[1], 0, width, tf.int32)
    return (
        tf.clip_by_value(cy - cut_h // 2, 0, height),
        tf.clip_by_value(cy + cut_h // 2, 0, height),
        tf.clip_by_value(cx - cut_w // 2, 0, width),
        tf.clip_by_value(cx + cut_w // 2, 0, width),
    )


def cutmix(images, labels, box):
    """Pastes `box` of roll(images, 1) into images; labels mixed by its area.
    images (B, H, W, C), labels (B, K) -> same shapes."""
    y1, y2, x1, x2 = box
    shape = tf.shape(images)
    height, width = shape[1], shape[2]
    images = paste(images, tf.roll(images[:, y1:y2, x1:x2], 1, axis=0), y1, x1)
    area = tf.cast((y2 - y1) * (x2 - x1), tf.float32) / tf.cast(height * width, tf.float32)
    labels = (1.0 - area) * labels + area * tf.roll(labels, 1, axis=0)
    return images, labels


def mix_batch(images, labels, seed, mixup_alpha=0.0, cutmix_alpha=0.0):
    """Mixup or CutMix of a batch with the batch rolled by one (module docstring).

    Args:
      images: (B, H, W, C) float.
      labels: (B, K) float, one-hot or multi-hot.
      seed: int64 [2], the batch seed (`mix_seed`).
      mixup_alpha, cutmix_alpha: Beta alphas; 0 = off. Both on: one of the two per
        batch, CutMix with probability 0.5.
    Returns:
      (images, labels), same shapes and dtypes.
    """
    if not (mixup_alpha or cutmix_alpha):
        return images, labels
    labels = tf.cast(labels, images.dtype)
    choice_seed, lam_seed, box_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 3))

    def do_mixup():
        lam = sample_beta(lam_seed, mixup_alpha)
        return mixup(images, labels, tf.maximum(lam, 1.0 - lam))

    def do_cutmix():
        lam = sample_beta(lam_seed, cutmix_alpha)
        shape = tf.shape(images)
        return cutmix(images, labels, cutmix_box(lam, shape[1], shape[2], box_seed))

    if not cutmix_alpha:
        return do_mixup()
    if not mixup_alpha:
        return do_cutmix()
    use_cutmix = tf.random.stateless_uniform([], choice_seed) < 0.5
    return tf.cond(use_cutmix, do_cutmix, do_mixup)


def batch_mixer(seed, mixup_alpha, cutmix_alpha, num_classes):
    """fn(step, (images, labels)) -> (images, labels) mixed by `mix_batch` with the
    batch seed of (seed, step); integer labels (batch,) are one-hot encoded first."""

    def fn(step, batch):
        images, labels = batch
        if labels.dtype.is_integer and labels.shape.rank == 1:
            if not num_classes:
                raise ValueError("input.mixup / input.cutmix on integer labels need num_classes")
            labels = tf.one_hot(labels, num_classes)
        if not labels.dtype.is_floating or labels.shape.rank != 2:
            raise ValueError(
                "input.mixup / input.cutmix mix one-hot or multi-hot labels of shape "
                f"(batch, classes); the batches here have labels {labels.dtype.name} "
                f"{labels.shape} (an objective whose targets are not class labels?)"
            )
        return mix_batch(images, labels, mix_seed(seed, step), mixup_alpha, cutmix_alpha)

    return fn
