"""AugReg augmentation (trainers/augment/): per-image stateless RandAugment,
per-batch Mixup / CutMix, the AugReg names, and the pipeline staying a pure
function of (seed, step) with augmentation on."""

import re
from dataclasses import replace

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing

from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers.augment import crops, mixing, randaugment, settings
from keras_vit_trainers.input_spec import InputSpec

SPEC = InputSpec(image_size=28, seed=3, num_classes=4, crop="inception_crop", shuffle_buffer=100)
AUG = dict(randaug=(2, 10), mixup=0.2, cutmix=1.0)

# The AugReg settings (Steiner et al. 2021; big_vision configs/vit_i21k.py and
# configs/vit_i1k.py, RANDAUG_DEF and MIXUP_DEF), as `describe` writes them.
AUGREG_SETTINGS = {
    "none": "off",
    "light1": "randaug(2,0)",
    "light2": "randaug(2,10) mixup(0.2)",
    "medium1": "randaug(2,15) mixup(0.2)",
    "medium2": "randaug(2,15) mixup(0.5)",
    "strong1": "randaug(2,20) mixup(0.5)",
    "strong2": "randaug(2,20) mixup(0.8)",
}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d), n_train=96, n_test=8, per_shard=32)
    return str(d)


def _image(h=17, w=23, seed=0):
    return tf.constant(np.random.default_rng(seed).integers(0, 256, (h, w, 3)), tf.float32)


# --- config -------------------------------------------------------------------


def test_augreg_names_give_the_big_vision_table():
    assert sorted(settings.AUGREG) == sorted(AUGREG_SETTINGS)
    for name, expected in AUGREG_SETTINGS.items():
        got = settings.resolve({"aug_setting": name})
        assert settings.describe(got) == expected, name
        assert got["cutmix"] == 0.0, name


def test_resolve_forms_and_overrides():
    off = dict(randaug=None, mixup=0.0, cutmix=0.0)
    assert settings.resolve(None) == settings.resolve({}) == off
    assert settings.resolve({"crop": "inception_crop", "flip": True}) == off
    for value in ("randaug(2,15)", "randaug( 2, 15 )", "(2,15)", (2, 15), [2, 15], (2.0, 15.0)):
        assert settings.resolve({"randaug": value})["randaug"] == (2, 15), value
    for value in ("", "none", 0, (0, 10)):
        assert settings.resolve({"aug_setting": "strong1", "randaug": value})["randaug"] is None
    got = settings.resolve({"aug_setting": "medium2", "mixup": 0, "cutmix": 1.0})
    assert got == dict(randaug=(2, 15), mixup=0.0, cutmix=1.0)
    assert settings.resolve({"aug_setting": "light2", "randaug": "randaug(2,20)"}) == dict(
        randaug=(2, 20), mixup=0.2, cutmix=0.0
    )
    assert settings.resolve({"mixup": "0.5", "cutmix": None}) == dict(
        randaug=None, mixup=0.5, cutmix=0.0
    )
    assert settings.resolve(got) == got  # a resolved dict resolves to itself


@pytest.mark.parametrize(
    "cfg, key",
    [
        ({"aug_setting": "medium"}, "input.aug_setting='medium'"),
        ({"aug_setting": 3}, "input.aug_setting=3"),
        ({"randaug": "randaug(2)"}, re.escape("input.randaug='randaug(2)'")),
        ({"randaug": (2, 15, 1)}, r"input.randaug=\(2, 15, 1\)"),
        ({"randaug": (1.5, 10)}, r"input.randaug=\(1.5, 10\).*num_layers"),
        ({"randaug": (2, -1)}, r"input.randaug=\(2, -1\).*magnitude"),
        ({"randaug": "rand(a,b)"}, "input.randaug='rand"),
        ({"mixup": -0.2}, "input.mixup=-0.2"),
        ({"mixup": "lots"}, "input.mixup='lots'"),
        ({"mixup": True}, "input.mixup=True"),
        ({"cutmix": [1.0]}, r"input.cutmix=\[1.0\]"),
    ],
)
def test_bad_values_raise_naming_the_key(cfg, key):
    with pytest.raises(ValueError, match=key):
        settings.resolve(cfg)


# --- RandAugment ops ------------------------------------------------------------


@pytest.mark.parametrize("name", randaugment.OP_NAMES)
def test_each_op_keeps_shape_dtype_and_range(name):
    image = _image()
    for magnitude in (0, 10, 15, 20, 30):
        out = randaugment.apply_op(image, name, magnitude, [5, 6]).numpy()
        assert out.shape == (17, 23, 3) and out.dtype == np.float32, (name, magnitude)
        assert 0 <= out.min() and out.max() <= 255, (name, magnitude)
        np.testing.assert_array_equal(out, np.round(out))  # uint8 values, as the official ops


@pytest.mark.parametrize("name", randaugment.GEOMETRIC_OPS)
def test_geometric_ops_at_magnitude_0_are_the_identity(name):
    image = _image(21, 30)
    for seed in ([0, 1], [7, 8]):
        np.testing.assert_array_equal(randaugment.apply_op(image, name, 0, seed), image)


def test_official_level_mappings():
    image = _image()
    x = image.numpy()

    def same(name, m):
        return np.array_equal(randaugment.apply_op(image, name, m, [0, 0]), x)

    assert same("Posterize", 20) and same("SolarizeAdd", 0)
    assert not same("Posterize", 10) and not same("Solarize", 15) and not same("Brightness", 0)
    # Solarize threshold int(256 * m / 10) wraps in uint8: m=10 inverts all, m=15 >= 128.
    np.testing.assert_array_equal(randaugment.apply_op(image, "Solarize", 10, [0, 0]), 255 - x)
    np.testing.assert_array_equal(
        randaugment.apply_op(image, "Solarize", 15, [0, 0]), np.where(x < 128, x, 255 - x)
    )
    np.testing.assert_array_equal(
        randaugment.apply_op(image, "Posterize", 10, [0, 0]), x // 16 * 16
    )
    np.testing.assert_array_equal(
        randaugment.apply_op(image, "Posterize", 0, [0, 0]), x // 128 * 128
    )  # shift 8 acts as 7, as TF runs it


def test_translate_and_cutout_scale_with_the_image():
    # TranslateX at m=10 moves by 100/224 of the width: 25 px of a 56 px image.
    image = tf.constant(np.tile(np.arange(56, dtype=np.float32)[None, :, None], [8, 1, 3]))
    shifts = set()
    for seed in range(8):
        out = randaugment.apply_op(image, "TranslateX", 10, [seed, 0]).numpy()
        if out[0, 0, 0] == 25:  # content moved left
            np.testing.assert_array_equal(out[:, :31], image.numpy()[:, 25:])
            assert (out[:, 31:] == randaugment.FILL).all()
            shifts.add("left")
        else:
            np.testing.assert_array_equal(out[:, 25:], image.numpy()[:, :31])
            assert (out[:, :25] == randaugment.FILL).all()
            shifts.add("right")
    assert shifts == {"left", "right"}
    # Cutout at m=10 on a 224 px image: the official 80 x 80 square (2 * 40 px).
    sides = set()
    for seed in range(6):
        out = randaugment.apply_op(tf.zeros([224, 224, 3]), "Cutout", 10, [seed, 1]).numpy()
        rows, cols = np.nonzero(out[:, :, 0] == randaugment.FILL)
        sides.add((rows.max() - rows.min() + 1, cols.max() - cols.min() + 1))
        assert rows.max() - rows.min() < 80 and cols.max() - cols.min() < 80
    assert (80, 80) in sides


def test_randaug_works_on_any_size_in_graph_mode():
    fn = tf.function(
        lambda x, s: randaugment.randaug(x, s, 2, 15),
        input_signature=[tf.TensorSpec([None, None, 3], tf.float32), tf.TensorSpec([2], tf.int64)],
    )
    for h, w in ((9, 13), (32, 32), (40, 24)):
        out = fn(_image(h, w) + 0.4, tf.constant([h, w], tf.int64)).numpy()
        assert out.shape == (h, w, 3) and out.dtype == np.float32
        assert 0 <= out.min() and out.max() <= 255
    out = randaugment.randaug(_image(), tf.constant([1, 2], tf.int64), 2, 10, prob_range=(0.2, 0.8))
    assert out.shape == (17, 23, 3)


def test_each_image_draws_its_own_ops():
    seeds = [
        tf.random.experimental.stateless_split(tf.constant([3 * 65_537, i], tf.int64), 3)[2]
        for i in range(64)
    ]
    ops = np.stack([randaugment.sample_ops(s, 2).numpy() for s in seeds])
    assert ops.min() >= 0 and ops.max() < len(randaugment.OP_NAMES)
    assert len(set(ops[:, 0])) >= 12 and len(set(ops[:, 1])) >= 12
    assert len({tuple(o) for o in ops}) >= 40
    # randaug applies exactly the drawn op (checked on ops that draw nothing else).
    image = _image()
    unsigned = set(randaugment.OP_NAMES) - set(randaugment.GEOMETRIC_OPS)  # no sign, no centre
    assert len(unsigned) == 10
    checked = 0
    for i, s in enumerate(seeds):
        name = randaugment.OP_NAMES[randaugment.sample_ops(s, 1).numpy()[0]]
        if name in unsigned:
            np.testing.assert_array_equal(
                randaugment.randaug(image, s, 1, 10),
                randaugment.apply_op(image, name, 10, [i, 0]),
                err_msg=name,
            )
            checked += 1
    assert checked >= 20


def test_pipeline_randaugments_each_example_with_its_own_seed(data):
    spec = replace(SPEC, crop="none", flip=False)  # 28 px data at 28 px: the raw images
    ((plain, labels),) = testing.take(ip.train_dataset(data, spec, batch_size=8), 1)
    ((aug, aug_labels),) = testing.take(
        ip.train_dataset(data, replace(spec, augmentation={"randaug": (2, 10)}), batch_size=8), 1
    )
    np.testing.assert_array_equal(labels, aug_labels)
    raw = np.round(plain * ip.SCALE + ip.MEAN)
    ops = set()
    for i in range(8):  # example i of epoch 0: seed [seed * 65537 + 0, i], third split
        seed = tf.random.experimental.stateless_split(tf.constant([3 * 65_537, i], tf.int64), 3)[2]
        expected = ip.scale(randaugment.randaug(tf.constant(raw[i]), seed, 2, 10))
        np.testing.assert_allclose(aug[i], expected, atol=1e-6)
        ops.add(tuple(randaugment.sample_ops(seed, 2).numpy()))
    assert len(ops) >= 6


def test_turning_randaug_on_keeps_the_crop_and_flip_seeds():
    for s in ([0, 0], [3 * 65_537, 17], [-5, 2**40]):
        s = tf.constant(s, tf.int64)
        np.testing.assert_array_equal(
            tf.random.experimental.stateless_split(s, 3)[:2],
            tf.random.experimental.stateless_split(s, 2),
        )


def test_each_crop_name_gives_the_training_size_and_others_are_named():
    image = _image(30, 40)
    seed = tf.constant([4, 5], tf.int64)
    for name in settings.CROPS:
        out = crops.crop(image, seed, (12, 16), name)
        assert out.shape == (12, 16, 3) and out.dtype == tf.float32, name
        np.testing.assert_array_equal(out, crops.crop(image, seed, (12, 16), name))  # stateless
    resized = tf.image.resize(image, (12, 16))
    np.testing.assert_array_equal(crops.crop(image, seed, (12, 16), "none"), resized)
    assert not np.array_equal(crops.crop(image, seed, (12, 16), "inception_crop"), resized)
    flips = {bool(np.array_equal(crops.flip(resized, [i, 0]), resized[:, ::-1])) for i in range(8)}
    assert flips == {True, False}
    with pytest.raises(ValueError, match="^input.crop='medium1': expected inception_crop, "):
        crops.crop(image, seed, (12, 16), "medium1")


# --- Mixup / CutMix ---------------------------------------------------------------


def _constant_batch(b=8, h=12, w=20):
    values = 10.0 * (np.arange(b) + 1)
    images = tf.constant(np.broadcast_to(values[:, None, None, None], (b, h, w, 3)), tf.float32)
    return values, images, tf.eye(b)


def test_mixup_mixes_images_and_labels_by_one_ratio():
    values, images, labels = _constant_batch()
    lams = []
    for step in range(6):
        out, mixed = mixing.mix_batch(images, labels, mixing.mix_seed(0, step), mixup_alpha=0.5)
        out, mixed = out.numpy(), mixed.numpy()
        np.testing.assert_allclose(mixed.sum(1), 1.0, rtol=1e-6)
        partner = np.roll(values, 1)
        lam = (out[:, 0, 0, 0] - partner) / (values - partner)
        np.testing.assert_allclose(lam, lam[0], atol=1e-5)  # one ratio per batch
        assert 0.5 <= lam[0] <= 1.0 + 1e-6  # folded as big_vision's sorted Dirichlet
        np.testing.assert_allclose(mixed[np.arange(8), np.arange(8)], lam[0], atol=1e-5)
        np.testing.assert_allclose(mixed[np.arange(8), np.arange(8) - 1], 1 - lam[0], atol=1e-5)
        assert (out == out[:, :1, :1]).all()  # uniform blend, no box
        lams.append(lam[0])
    assert len(set(np.round(lams, 4))) == 6  # a new ratio each step


def test_cutmix_labels_are_the_pasted_area():
    values, images, labels = _constant_batch()
    areas = []
    for step in range(8):
        out, mixed = mixing.mix_batch(images, labels, mixing.mix_seed(1, step), cutmix_alpha=1.0)
        out, mixed = out.numpy()[..., 0], mixed.numpy()
        np.testing.assert_allclose(mixed.sum(1), 1.0, rtol=1e-6)
        partner = np.roll(values, 1)
        from_partner = out == partner[:, None, None]
        assert (from_partner | (out == values[:, None, None])).all()  # pixels pasted, not blended
        area = from_partner.mean(axis=(1, 2))
        np.testing.assert_allclose(area, area[0])  # one box per batch
        np.testing.assert_allclose(mixed[np.arange(8), np.arange(8) - 1], area, atol=1e-6)
        np.testing.assert_allclose(mixed[np.arange(8), np.arange(8)], 1 - area, atol=1e-6)
        rows, cols = np.nonzero(from_partner[0])
        if area[0]:  # a rectangle
            assert len(rows) == (np.ptp(rows) + 1) * (np.ptp(cols) + 1)
        areas.append(area[0])
    assert len({round(a, 6) for a in areas}) >= 5 and max(areas) > 0


def test_both_on_picks_one_per_batch():
    values, images, labels = _constant_batch()
    kinds = []
    for step in range(24):
        out, mixed = mixing.mix_batch(images, labels, mixing.mix_seed(2, step), 0.5, 1.0)
        out = out.numpy()[..., 0]
        np.testing.assert_allclose(mixed.numpy().sum(1), 1.0, rtol=1e-6)
        pasted = np.isin(out, values).all()
        uniform = (out == out[:, :1, :1]).all()
        kinds.append("cutmix" if pasted and not uniform else "mixup" if uniform else "?")
    assert "?" not in kinds
    assert 6 <= kinds.count("cutmix") <= 18


# --- the pipeline -----------------------------------------------------------------


def test_no_augmentation_is_todays_stream(data):
    ref = testing.take(ip.train_dataset(data, SPEC, batch_size=8), 3)
    for off in (None, {}, {"aug_setting": "none"}, {"randaug": "", "mixup": 0, "cutmix": None}):
        got = testing.take(ip.train_dataset(data, replace(SPEC, augmentation=off), batch_size=8), 3)
        for (a, b), (c, d) in zip(ref, got):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, d)


def test_augmented_stream_is_deterministic_and_resumable(data):

    def one_hot(x, y):  # what objectives.Classification.map_batch does
        return x, tf.one_hot(y, 4)

    spec = replace(SPEC, batch_fn=one_hot, augmentation=AUG)
    full = testing.take(ip.train_dataset(data, spec, batch_size=8), 16)  # > 1 epoch (12 steps)
    again = testing.take(ip.train_dataset(data, spec, batch_size=8), 16)
    resumed = testing.take(ip.train_dataset(data, spec, batch_size=8, start_step=9), 7)
    for (a, b), (c, d) in zip(full, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    for (a, b), (c, d) in zip(full[9:], resumed):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    plain = testing.take(ip.train_dataset(data, replace(SPEC, batch_fn=one_hot), batch_size=8), 2)
    for (x, y), (x0, y0) in zip(full, plain):
        assert x.shape == x0.shape == (8, 28, 28, 3) and x.dtype == np.float32
        assert y.shape == y0.shape == (8, 4) and y.dtype == np.float32
        assert -1.0 <= x.min() and x.max() <= 1.0
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
        assert not np.array_equal(x, x0)
    assert any((y < 1).any() and (y > 0).any() for _, y in full)  # labels were mixed
    dist = ip.distributed_train_dataset(tf.distribute.get_strategy(), data, spec, 8)
    x, y = next(iter(dist))
    np.testing.assert_array_equal(x, full[0][0])
    np.testing.assert_array_equal(y, full[0][1])


def test_a_pipeline_feeding_two_replicas_resumes_on_the_same_batches(data):
    # Under a mirrored strategy on one worker the pipeline yields per-replica batches, two
    # per step: step s's are batches 2s and 2s + 1, mixed as in an uninterrupted run.
    spec = replace(SPEC, augmentation=AUG)
    kw = dict(batch_size=4, global_batch_size=8)
    full = testing.take(ip.train_dataset(data, spec, **kw), 14)
    resumed = testing.take(ip.train_dataset(data, spec, start_step=4, **kw), 6)
    for (a, b), (c, d) in zip(full[8:], resumed):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    # Files sharded over two workers, each pipeline feeding two replicas: a resume skips
    # the pipeline's own share of each step (2 x 4 examples), not one replica's.
    context = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4
    )
    spec = replace(spec, shard_by="files")
    kw = dict(kw, global_batch_size=16, input_context=context)
    full = testing.take(ip.train_dataset(data, spec, **kw), 14)
    resumed = testing.take(ip.train_dataset(data, spec, start_step=4, **kw), 6)
    for (a, b), (c, d) in zip(full[8:], resumed):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


def test_mixing_needs_class_labels(data):
    ((_, y),) = testing.take(
        ip.train_dataset(data, replace(SPEC, augmentation={"mixup": 0.5}), batch_size=8), 1
    )
    assert y.shape == (8, 4) and y.dtype == np.float32  # int labels one-hot encoded first
    np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)

    def patch_targets(x, y):  # like masked_patch: int targets per patch
        del y
        return x, tf.zeros([8, 16], tf.int32)

    with pytest.raises(ValueError, match="input.mixup / input.cutmix"):
        ip.train_dataset(
            data,
            replace(SPEC, batch_fn=patch_targets, augmentation={"cutmix": 1.0}),
            batch_size=8,
        )
