"""Masked patch prediction (paper §4.6): corruption, targets, loss, training, saving."""

import os
import sys
import textwrap

import keras
import numpy as np
import pytest
import tiny_models
import trainer_testing as testing

import keras_vit
from keras_vit import masked_patch
from keras_vit.layers.patch_corruption import KEPT, MASKED, REPLACED, UNCHANGED, PatchCorruption

# Sampling error bounds below are Z standard deviations of the binomial: a correct
# implementation fails one of them with probability < 1e-5.
Z = 5.0


def tiny_vit(classifier="token", **kwargs):
    """tests/tiny_models.py's ViT (16 px, 4 px patches, one block, 5 classes)."""
    return tiny_models.tiny_vit(classifier=classifier, **kwargs)


# -- Corruption ---------------------------------------------------------------------


def test_corruption_statistics_match_50_percent_and_80_10_10():
    batch, tokens = 4096, 64
    layer = PatchCorruption(seed=3)
    kinds = keras.ops.convert_to_numpy(
        layer.corruption_kinds(np.zeros((batch, tokens, 4), "float32"))
    )
    corrupted = kinds != KEPT
    # Exactly half of every image's patches are corrupted ...
    np.testing.assert_array_equal(corrupted.sum(axis=1), np.full(batch, tokens // 2))
    # ... chosen uniformly: every position is corrupted in ~50% of the images.
    per_position = corrupted.mean(axis=0)
    bound = Z * np.sqrt(0.25 / batch)
    assert np.abs(per_position - 0.5).max() < bound, (per_position.min(), per_position.max())
    # Of the n corrupted positions, 80% [mask], 10% random patch, 10% unchanged.
    n = corrupted.sum()
    for kind, p in ((MASKED, 0.8), (REPLACED, 0.1), (UNCHANGED, 0.1)):
        fraction = (kinds == kind).sum() / n
        assert abs(fraction - p) < Z * np.sqrt(p * (1 - p) / n), (kind, fraction)


def test_corruption_count_rounds_half_up_and_is_at_least_one():
    assert PatchCorruption().num_corrupted(49) == 25
    assert PatchCorruption().num_corrupted(196) == 98
    assert PatchCorruption(corruption_rate=0.01).num_corrupted(4) == 1


def test_corruption_replaces_as_the_kinds_say(rng):
    batch, tokens, hidden = 256, 16, 8
    x = rng.normal(size=(batch, tokens, hidden)).astype("float32")  # all rows distinct
    layer = PatchCorruption(seed=0)
    layer.build(x.shape)
    kinds = rng.choice([KEPT, MASKED, REPLACED, UNCHANGED], size=(batch, tokens))
    out = keras.ops.convert_to_numpy(layer.apply_corruption(x, kinds.astype("int32")))
    mask = keras.ops.convert_to_numpy(layer.mask_embedding)

    keep = (kinds == KEPT) | (kinds == UNCHANGED)
    np.testing.assert_array_equal(out[keep], x[keep])
    np.testing.assert_array_equal(
        out[kinds == MASKED], np.broadcast_to(mask, out[kinds == MASKED].shape)
    )
    # A replaced patch is another patch of the same image, never itself; all
    # other positions occur.
    offsets = []
    for b, t in zip(*np.nonzero(kinds == REPLACED)):
        source = np.nonzero((x[b] == out[b, t]).all(axis=1))[0]
        assert len(source) == 1 and source[0] != t, (b, t, source)
        offsets.append((source[0] - t) % tokens)
    assert set(offsets) == set(range(1, tokens))


def test_corruption_layer_output_and_mask(rng):
    x = rng.normal(size=(32, 10, 6)).astype("float32")
    layer = PatchCorruption(seed=1)
    out, corrupted = layer(x)
    out, corrupted = keras.ops.convert_to_numpy(out), keras.ops.convert_to_numpy(corrupted)
    assert out.shape == x.shape and corrupted.shape == (32, 10)
    np.testing.assert_array_equal(corrupted.sum(axis=1), np.full(32, 5.0))
    # Positions not corrupted pass through untouched; most corrupted ones change.
    np.testing.assert_array_equal(out[corrupted == 0], x[corrupted == 0])
    changed = (out != x).any(axis=-1)
    assert not changed[corrupted == 0].any()
    assert changed[corrupted == 1].mean() > 0.7
    # Seeded: a fresh layer with the same seed corrupts the same positions.
    again = PatchCorruption(seed=1)
    _, corrupted_again = again(x)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(corrupted_again), corrupted)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(corruption_rate=0.0), "corruption_rate"),
        (dict(corruption_rate=1.5), "corruption_rate"),
        (dict(mask_prob=0.95, random_prob=0.1), "sum to at most 1"),
        (dict(random_prob=-0.1), "must be >= 0"),
    ],
)
def test_corruption_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        PatchCorruption(**kwargs)


def test_corruption_needs_two_patches_for_random_replacement():
    with pytest.raises(ValueError, match="at least 2 patches"):
        PatchCorruption()(np.zeros((2, 1, 4), "float32"))


# -- Targets ------------------------------------------------------------------------


def _image_of_patches(patches, patch=4):
    """A 2x2-patch image in [-1, 1] from four (patch, patch, 3) uint8 patches."""
    top = np.concatenate(patches[:2], axis=1)
    bottom = np.concatenate(patches[2:], axis=1)
    pixels = np.concatenate([top, bottom], axis=0)[None].astype("float32")
    return pixels / 127.5 - 1.0


def test_rgb_targets_of_hand_made_patches():
    red = np.zeros((4, 4, 3), np.uint8)
    red[..., 0] = 255  # R 255 -> 7: 7 * 64
    edges = np.zeros((4, 4, 3), np.uint8)
    edges[..., 0], edges[..., 1], edges[..., 2] = 32, 31, 224  # 1, 0, 7 -> 64 + 7
    mixed = np.zeros((4, 4, 3), np.uint8)
    mixed[:2, :, 0] = 64  # R mean 32 -> 1
    mixed[..., 1] = 100  # G 100 -> 3
    mixed[:, :2, 2] = 191  # B mean 95.5 -> 2
    black = np.zeros((4, 4, 3), np.uint8)
    targets = masked_patch.mean_colour_targets(_image_of_patches([red, edges, mixed, black]), 4)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(targets), [[448, 71, 64 + 3 * 8 + 2, 0]]
    )
    assert masked_patch.num_target_classes("rgb") == 512


def test_intensity_targets_of_hand_made_patches():
    def grey(v):
        return np.full((4, 4, 3), v, np.uint8)

    colour = np.zeros((4, 4, 3), np.uint8)
    colour[..., 0], colour[..., 1], colour[..., 2] = 255, 96, 0  # mean 117 -> 3
    image = _image_of_patches([grey(0), grey(128), colour, grey(255)])
    targets = masked_patch.mean_colour_targets(image, 4, target="intensity")
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(targets), [[0, 4, 3, 7]])
    assert masked_patch.num_target_classes("intensity") == 8
    # On grayscale images the RGB class carries the same information.
    rgb = keras.ops.convert_to_numpy(
        masked_patch.mean_colour_targets(
            _image_of_patches([grey(0), grey(128), grey(40), grey(255)]), 4
        )
    )
    np.testing.assert_array_equal(rgb, [[0, 4 * 73, 1 * 73, 7 * 73]])


def test_targets_bad_input():
    with pytest.raises(ValueError, match="not a multiple of the patch size 3x3"):
        masked_patch.mean_colour_targets(np.zeros((1, 8, 8, 3), "float32"), 3)
    with pytest.raises(ValueError, match="target must be one of"):
        masked_patch.mean_colour_targets(np.zeros((1, 8, 8, 3), "float32"), 4, target="hsv")
    with pytest.raises(ValueError, match=r"\(batch, height, width, 3\)"):
        masked_patch.mean_colour_targets(np.zeros((1, 8, 8), "float32"), 4)
    with pytest.raises(ValueError, match=r"\(batch, height, width, 3\) for target='rgb'"):
        masked_patch.mean_colour_targets(np.zeros((1, 8, 8, 1), "float32"), 4)


def test_intensity_targets_of_grey_images_equal_those_of_the_same_images_in_rgb(rng):
    grey = rng.uniform(-1, 1, (2, 8, 8, 1)).astype("float32")
    one = masked_patch.mean_colour_targets(grey, 4, target="intensity")
    three = masked_patch.mean_colour_targets(np.repeat(grey, 3, -1), 4, target="intensity")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(one), keras.ops.convert_to_numpy(three)
    )


def test_predictor_takes_grey_backbones_for_intensity_and_refuses_what_cannot_work():
    grey = tiny_vit(input_shape=(16, 16, 1))
    model = masked_patch.MaskedPatchPredictor(grey, target="intensity", seed=0)
    images = np.zeros((2, 16, 16, 1), "float32")
    assert keras.ops.convert_to_numpy(model.targets(images)).shape == (2, 16)
    assert keras.ops.convert_to_numpy(model(images)).shape == (2, 16, 9)
    with pytest.raises(ValueError, match="target='rgb' needs RGB images; .* 1 channel"):
        masked_patch.MaskedPatchPredictor(grey, target="rgb")
    any_size = tiny_vit(input_shape=(None, None, 3))
    with pytest.raises(ValueError, match="needs a backbone of one resolution"):
        masked_patch.MaskedPatchPredictor(any_size)


# -- Loss ---------------------------------------------------------------------------


def _log_softmax(z):
    z = z - z.max(-1, keepdims=True)
    return z - np.log(np.exp(z).sum(-1, keepdims=True))


def test_unmasked_positions_do_not_contribute_to_the_loss(rng):
    batch, patches, classes = 6, 9, 8
    logits = rng.normal(size=(batch, patches, classes)).astype("float32")
    mask = (rng.uniform(size=(batch, patches)) < 0.5).astype("float32")
    mask[:, 0] = 1.0
    targets = rng.integers(0, classes, (batch, patches))
    packed = np.concatenate([logits, mask[..., None]], axis=-1)

    loss = keras.ops.convert_to_numpy(masked_patch.masked_patch_cross_entropy(targets, packed))
    ce = -np.take_along_axis(_log_softmax(logits), targets[..., None], -1)[..., 0]
    expected = (ce * mask).sum(1) / mask.sum(1)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)

    # Changing logits and targets where the mask is 0 changes nothing ...
    other = packed.copy()
    other[..., :classes] += 5.0 * rng.normal(size=logits.shape) * (1 - mask)[..., None]
    other_targets = np.where(mask == 1, targets, (targets + 1) % classes)
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(masked_patch.masked_patch_cross_entropy(other_targets, other)),
        loss,
    )


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="uses tf.GradientTape")
def test_unmasked_positions_get_no_gradient(rng):
    import tensorflow as tf

    mask = np.array([[1, 0, 1, 0, 0], [0, 1, 0, 0, 1]], "float32")
    packed = tf.Variable(
        np.concatenate([rng.normal(size=(2, 5, 8)).astype("float32"), mask[..., None]], axis=-1)
    )
    targets = rng.integers(0, 8, (2, 5))
    with tf.GradientTape() as tape:
        total = tf.reduce_sum(masked_patch.masked_patch_cross_entropy(targets, packed))
    grad = tape.gradient(total, packed).numpy()[..., :8]
    assert not grad[mask == 0].any()
    assert np.abs(grad[mask == 1]).sum(-1).min() > 0


def test_accuracy_counts_corrupted_positions_only():
    logits = np.zeros((1, 4, 3), "float32")
    logits[0, :, 1] = 1.0  # predicts class 1 everywhere
    targets = np.array([[1, 1, 0, 0]])
    mask = np.array([[1, 0, 1, 0]], "float32")  # one right, one wrong; others ignored
    packed = np.concatenate([logits, mask[..., None]], axis=-1)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(masked_patch.masked_patch_accuracy(targets, packed)), [0.5]
    )


# -- The model ----------------------------------------------------------------------


@pytest.mark.parametrize("classifier", ["token", "gap"])
def test_predictor_shapes_and_shared_weights(classifier):
    vit = tiny_vit(classifier)
    model = masked_patch.MaskedPatchPredictor(vit, target="intensity", seed=0)
    out = keras.ops.convert_to_numpy(model(np.zeros((3, 16, 16, 3), "float32")))
    assert out.shape == (3, 16, 9)
    np.testing.assert_array_equal(out[..., -1].sum(1), np.full(3, 8.0))
    assert model.backbone is vit
    assert model.get_layer("Transformer") is vit.get_layer("Transformer")
    assert model.get_layer("embedding") is vit.get_layer("embedding")
    # Trainable: the backbone's encoder path + [mask] + the per-token head; not the
    # backbone's classification head, which this task never uses.
    names = {v.path for v in model.trainable_variables}
    assert "patch_corruption/mask_embedding" in names
    assert not any(n.startswith("head/") for n in names)
    vit_used = {v.path for v in vit.trainable_variables} - {"head/kernel", "head/bias"}
    assert vit_used <= names


def test_a_few_steps_reduce_the_loss(rng):
    keras.utils.set_random_seed(0)
    # Each image is one random grey level: a corrupted patch's class is readable
    # from the uncorrupted patches of its image, and from nothing else.
    levels = rng.integers(0, 256, 128)
    images = np.broadcast_to((levels / 127.5 - 1.0)[:, None, None, None], (128, 12, 12, 3)).astype(
        "float32"
    )
    model = masked_patch.MaskedPatchPredictor(
        tiny_vit("gap", image_size=12), target="intensity", seed=0
    )
    targets = model.targets(images)
    loss = masked_patch.MaskedPatchLoss()

    def mean_loss():
        return float(keras.ops.convert_to_numpy(loss(targets, model(images))))

    before = mean_loss()
    np.testing.assert_allclose(before, np.log(8), rtol=1e-5)  # zero-initialised head
    model.compile(keras.optimizers.Adam(1e-2), loss=loss, jit_compile=False)
    model.fit(images, targets, batch_size=32, epochs=5, verbose=0)
    after = mean_loss()
    # Below the entropy of the class frequencies: the cross-entropy of the best
    # predictor that ignores the image (which is all a model that learnt nothing
    # from the uncorrupted patches can reach).
    freq = np.bincount(levels // 32, minlength=8) / len(levels)
    marginal_entropy = -np.sum(freq[freq > 0] * np.log(freq[freq > 0]))
    assert after < marginal_entropy - 0.2, (before, after, marginal_entropy)


def test_predictor_serialisation_round_trip(tmp_path, rng):
    model = masked_patch.MaskedPatchPredictor(
        tiny_vit(), target="rgb", bits=2, corruption_rate=0.25, seed=7
    )
    model(np.zeros((1, 16, 16, 3), "float32"))
    model.backbone.get_layer("head").bias.assign(np.arange(5, dtype="float32"))
    path = str(tmp_path / "ssl.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, masked_patch.MaskedPatchPredictor)
    assert isinstance(loaded.backbone, keras_vit.VisionTransformer)
    assert loaded.get_config() == model.get_config()
    assert loaded.num_classes == 64 and loaded.corruption.num_corrupted(16) == 4
    for a, b in zip(model.get_weights(), loaded.get_weights()):
        np.testing.assert_array_equal(a, b)
    # The backbone's own (unused) head is saved and restored too.
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(loaded.backbone.get_layer("head").bias),
        keras.ops.convert_to_numpy(model.backbone.get_layer("head").bias),
    )


_JAX_SCRIPT = textwrap.dedent("""
    import numpy as np, keras, keras_vit
    from keras_vit import masked_patch
    assert keras.backend.backend() == "jax"
    vit = keras_vit.VisionTransformer(image_size=8, patch_size=4, hidden_size=8,
                                      mlp_dim=16, num_heads=2, num_layers=1)
    model = masked_patch.MaskedPatchPredictor(vit, target="intensity", seed=0)
    x = np.linspace(-1, 1, 4 * 8 * 8 * 3, dtype="float32").reshape(4, 8, 8, 3)
    # Image b's pixels rise through [64 b, 64 (b + 1)): its top patches' mean
    # falls in intensity bin 2 b, its bottom patches' in bin 2 b + 1.
    y = model.targets(x)
    out = model(x)
    loss = np.asarray(masked_patch.MaskedPatchLoss()(y, out))
    out = np.asarray(out)
    assert out.shape == (4, 4, 9) and (out[..., -1].sum(1) == 2).all(), out.shape
    assert np.asarray(y).tolist() == [[0, 0, 1, 1], [2, 2, 3, 3], [4, 4, 5, 5],
                                      [6, 6, 7, 7]], y
    assert abs(loss - np.log(8)) < 1e-5, loss  # zero-initialised head
    print("ok")
""")


@pytest.fixture(scope="module", autouse=True)
def jax_process(request):
    """The JAX-backend check's process, started before this module's first test when
    `test_runs_on_the_jax_backend` is selected, so that its JAX start-up and
    compiles overlap the other tests here; killed at the module's end if still
    running. None when that test is not selected."""
    selected = [
        item
        for item in request.session.items
        if getattr(item, "module", None) is request.module
        and item.name == "test_runs_on_the_jax_backend"
    ]
    if not selected:
        yield None
        return
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu")
    with testing.started([sys.executable, "-c", _JAX_SCRIPT], env=env) as process:
        yield process


def test_runs_on_the_jax_backend(jax_process):
    stdout, stderr = jax_process.communicate(timeout=300)  # on a timeout, the fixture kills it
    assert jax_process.returncode == 0, stderr[-3000:]
    assert stdout.startswith("ok")
