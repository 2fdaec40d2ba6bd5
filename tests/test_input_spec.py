"""trainers/input_spec.py: the spec built once from the config, and the input
pipeline's stages (trainers/input_pipeline.py) each on its own, on tiny records."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing

from keras_vit_configs import fashion_mnist
from keras_vit_data import image_header, records
from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers import objectives
from keras_vit_trainers.augment import settings as augment_settings
from keras_vit_trainers.input_spec import InputSpec

N_TRAIN, PER_SHARD = 24, 8  # three shards


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = str(tmp_path_factory.mktemp("data"))
    testing.make_tiny_data(d, n_train=N_TRAIN, n_test=8, per_shard=PER_SHARD)
    return d


@pytest.fixture(scope="module")
def info(data):
    return ip.get_split(data, "train")


def _records(info):
    return [r.numpy() for r in records.read_records(info)]


def test_from_config_reads_every_data_fact_once():
    config = fashion_mnist.get_config()
    config.input.update(shard_by="files", strict=True, aug_setting="light1", cutmix=0.5)
    config.update(seed=7, train_examples=40, train_split="holdout")
    objective = objectives.get("classification")
    spec = InputSpec.from_config(config, 10, False, objective)
    assert spec.image_size == ip.image_hw(config.image_size)
    assert (spec.shard_by, spec.strict, spec.seed) == ("files", True, 7)
    assert spec.crop == config.input.crop == "none"  # fashion_mnist: flips only
    assert (spec.split, spec.max_examples, spec.num_classes) == ("holdout", 40, 10)
    assert spec.augmentation == augment_settings.resolve(config.input)
    assert spec.augmentation["cutmix"] == 0.5
    assert spec.max_pixels == image_header.DEFAULT_MAX_PIXELS  # input.max_pixels unset
    images, labels = spec.batch_fn(tf.zeros([2, 4, 4, 3]), tf.constant([1, 3]))
    np.testing.assert_array_equal(labels, tf.one_hot([1, 3], 10))
    config.input.max_pixels = 1000
    assert InputSpec.from_config(config, 10, False, objective).max_pixels == 1000
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.seed = 1


def test_pipeline_share_splits_by_files_or_examples(info):
    spec = InputSpec(shard_by="files")
    ctx = tf.distribute.InputContext(num_input_pipelines=3, input_pipeline_id=1)
    share = ip.pipeline_share(
        info, spec, batch_size=2, global_batch_size=6, start_step=5, input_context=ctx
    )
    assert share.files == ((info.files[1], 0, PER_SHARD),)
    # 5 steps of this pipeline's 2 examples: epoch 1 of its 8, 2 in.
    assert (share.start_epoch, share.skip, share.stride, share.offset) == (1, 2, 1, 0)
    share = ip.pipeline_share(
        info,
        dataclasses.replace(spec, shard_by="examples"),
        batch_size=1,
        global_batch_size=6,
        start_step=5,
        input_context=ctx,
    )
    # 5 global steps of 6 examples: epoch 1 of 24, 6 in; every third example from the 2nd.
    assert (share.start_epoch, share.skip, share.stride, share.offset) == (1, 6, 3, 1)
    assert (share.batches_per_step, share.first_batch) == (2, 10)
    with pytest.raises(ValueError, match=r"input.shard_by='rows': expected one of"):
        ip.pipeline_share(
            info,
            InputSpec(shard_by="rows"),
            batch_size=2,
            global_batch_size=None,
            start_step=0,
            input_context=None,
        )
    with pytest.raises(ValueError, match="not a multiple of the per-replica batch_size=4"):
        ip.pipeline_share(
            info, spec, batch_size=4, global_batch_size=6, start_step=0, input_context=None
        )


def test_records_stream_reads_each_record_once_an_epoch_and_resumes(info):
    spec = InputSpec(shuffle_buffer=5, seed=2)
    share = ip.pipeline_share(
        info, spec, batch_size=1, global_batch_size=None, start_step=0, input_context=None
    )
    stream = [(int(e), int(i), r.numpy()) for e, i, r in ip.records_stream(spec, share).take(60)]
    every = sorted(_records(info))
    for epoch in (0, 1):
        mine = [s for s in stream if s[0] == epoch]
        assert [i for _, i, _ in mine] == list(range(N_TRAIN))
        assert sorted(r for _, _, r in mine) == every
    epochs = [[r for e, _, r in stream if e == epoch] for epoch in (0, 1)]
    assert epochs[0] != epochs[1]  # each epoch in its own order
    resumed = ip.pipeline_share(
        info, spec, batch_size=1, global_batch_size=None, start_step=27, input_context=None
    )
    again = [(int(e), int(i), r.numpy()) for e, i, r in ip.records_stream(spec, resumed).take(33)]
    assert again == stream[27:]


@pytest.fixture(scope="module")
def many_shards(tmp_path_factory):
    """40 shards of 3 records (more than CYCLE files: three groups an epoch)."""
    d = str(tmp_path_factory.mktemp("many"))
    testing.make_tiny_data(d, n_train=120, n_test=8, per_shard=3)
    return ip.get_split(d, "train")


def test_auto_sharding_gives_each_of_4_pipelines_its_own_quarter_of_8_files(tmp_path, caplog):
    d = str(tmp_path / "eight")
    testing.make_tiny_data(d, n_train=64, n_test=8, per_shard=8)
    info = ip.get_split(d, "train")
    assert len(info.files) == 8
    spec = InputSpec(shuffle_buffer=4, seed=1)  # shard_by="auto", the default
    total = sum(tf.io.gfile.stat(f).length for f in info.files)
    seen, files, read = [], [], 0
    with caplog.at_level("INFO"):
        for pipeline in range(4):
            ctx = tf.distribute.InputContext(num_input_pipelines=4, input_pipeline_id=pipeline)
            share = ip.pipeline_share(
                info, spec, batch_size=2, global_batch_size=8, start_step=0, input_context=ctx
            )
            assert len(share.files) == 2 and share.stride == 1  # opens its 2 files only
            assert sum(count for _, _, count in share.files) == 16  # a quarter of the records
            files += [f for f, _, _ in share.files]
            read += sum(tf.io.gfile.stat(f).length for f, _, _ in share.files)
            epoch = [r.numpy() for _, _, r in ip.records_stream(spec, share).take(16)]
            seen += epoch
    assert sorted(files) == sorted(info.files) and read == total  # each byte read once
    assert sorted(seen) == sorted(_records(info))  # the epoch once, across the four
    assert "input.shard_by=auto: by files (8 files for 4 input pipelines)" in caplog.text
    # Fewer files than pipelines: by example, each reading all and keeping 1/P.
    ctx = tf.distribute.InputContext(num_input_pipelines=16, input_pipeline_id=3)
    share = ip.pipeline_share(
        info, spec, batch_size=1, global_batch_size=16, start_step=0, input_context=ctx
    )
    assert (len(share.files), share.stride, share.offset) == (8, 16, 3)


def test_a_resume_reads_at_most_a_group_and_a_window_wherever_it_stops(many_shards, monkeypatch):
    info = many_shards
    spec = InputSpec(shuffle_buffer=7, seed=5)
    share = ip.pipeline_share(
        info, spec, batch_size=1, global_batch_size=None, start_step=0, input_context=None
    )
    stream = [(int(e), int(i), r.numpy()) for e, i, r in ip.records_stream(spec, share).take(240)]
    for epoch in (0, 1):
        mine = [r for e, _, r in stream if e == epoch]
        assert sorted(mine) == sorted(_records(info)) and len(mine) == 120
    opened = []
    real = ip.records.file_records

    def counting(path, start, count):
        opened.append(1)
        return real(path, start, count)

    for step in (1, 64, 110, 119, 121, 200):  # early, in later groups, the next epoch
        opened.clear()
        resumed = ip.pipeline_share(
            info, spec, batch_size=1, global_batch_size=None, start_step=step, input_context=None
        )
        monkeypatch.setattr(ip.records, "file_records", counting)
        again = [
            (int(e), int(i), r.numpy()) for e, i, r in ip.records_stream(spec, resumed).take(20)
        ]
        monkeypatch.setattr(ip.records, "file_records", real)
        assert again == stream[step : step + 20]
        # Only the files of the group the resume lands in (and of the next, as the
        # stream goes on) are opened, never the groups before it.
        assert len(opened) <= 2 * ip.CYCLE


def test_the_shuffle_window_is_bounded_by_bytes(many_shards):
    info = many_shards
    mean = sum(tf.io.gfile.stat(f).length for f in info.files) // info.num_examples
    spec = InputSpec(shuffle_buffer=50, shuffle_bytes=10 * mean + 1)
    assert ip.shuffle_window(info, spec) == 10  # 50 records would not fit
    assert ip.shuffle_window(info, dataclasses.replace(spec, shuffle_bytes=0)) == 50
    assert ip.shuffle_window(info, dataclasses.replace(spec, shuffle_buffer=1)) == 1
    share = ip.pipeline_share(
        info, spec, batch_size=1, global_batch_size=None, start_step=0, input_context=None
    )
    assert share.window == 10


def test_example_stage_decodes_and_augments_each_record_by_its_seed(info):
    spec = InputSpec(image_size=12, crop="random_crop", num_classes=4, strict=True)
    record = _records(info)[:1] * 2
    ds = tf.data.Dataset.from_tensor_slices(
        (tf.constant([0, 0], tf.int64), tf.constant([0, 1], tf.int64), record)
    )
    (a, ya), (b, yb) = list(ip.example_stage(ds, spec))
    assert a.shape == (12, 12, 3) and a.dtype == tf.float32 and ya == yb
    assert -1.0 <= float(tf.reduce_min(a)) and float(tf.reduce_max(a)) <= 1.0
    assert not np.array_equal(a, b)  # the same record at two positions: two crops
    # Not strict: one (image, label, ok) per record; above max_pixels (28 x 28 > 100)
    # a record does not decode.
    lenient = dataclasses.replace(spec, strict=False, max_pixels=100)
    ((image, _, ok), _) = list(ip.example_stage(ds, lenient))
    assert not ok and not np.any(image)
    ((image, _, ok), _) = list(ip.example_stage(ds, dataclasses.replace(lenient, max_pixels=784)))
    assert ok and np.array_equal(image, a)


def test_batch_stage_fills_failed_rows_then_maps_the_batch():
    images = tf.reshape(tf.range(4, dtype=tf.float32), [4, 1, 1, 1])
    ok = tf.constant([True, False, True, True])
    ds = tf.data.Dataset.from_tensor_slices((images, tf.range(4), ok))
    spec = InputSpec(batch_fn=lambda x, y: (x * 2, y + 10))
    ((x, y),) = list(ip.batch_stage(ds, spec, 4))
    np.testing.assert_array_equal(y, [10, 10, 12, 13])
    np.testing.assert_array_equal(x[:, 0, 0, 0], [0, 0, 4, 6])
    strict = InputSpec(strict=True)
    ((x, y),) = list(ip.batch_stage(ds.map(lambda x, y, ok: (x, y)), strict, 3))
    np.testing.assert_array_equal(y, [0, 1, 2])  # drop_remainder: one batch of 3


def test_mix_stage_mixes_batches_by_their_number():
    images = tf.random.stateless_uniform([4, 8, 8, 3], [1, 2])
    ds = tf.data.Dataset.from_tensors((images, tf.constant([0, 1, 2, 3]))).repeat(3)
    off = InputSpec(num_classes=4, augmentation={"randaug": (1, 5)})
    assert ip.mix_stage(ds, off, first_batch=0) is ds
    spec = InputSpec(num_classes=4, seed=3, augmentation={"mixup": 0.5})
    mixed = testing.take(ip.mix_stage(ds, spec, first_batch=0), 3)
    later = testing.take(ip.mix_stage(ds, spec, first_batch=1), 2)
    for (x, y), (u, v) in zip(mixed[1:], later):  # batch n: the same mix, whatever the start
        np.testing.assert_array_equal(x, u)
        np.testing.assert_array_equal(y, v)
    for _, y in mixed:
        assert y.shape == (4, 4) and y.dtype == np.float32
        np.testing.assert_allclose(y.sum(1), 1.0, rtol=1e-6)
    assert not np.array_equal(mixed[0][0], images)
    assert not np.array_equal(mixed[0][0], mixed[1][0])  # each batch its own mix


def test_the_models_normalisation_is_the_pipelines(data):
    """A model whose checkpoint states its input normalisation (timm, transformers) is
    trained and evaluated on pixels normalised that way, as its exports normalise them:
    (x / 255 - mean) / std per channel, within float32 rounding of the float64 value."""
    preprocessing = {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}
    official = InputSpec(image_size=28, num_classes=4)
    normalised = dataclasses.replace(official, preprocessing=preprocessing)
    (a, labels_a), (b, labels_b) = (
        next(iter(ip.eval_dataset(data, spec, batch_size=8, split="test")))[:2]
        for spec in (official, normalised)
    )
    np.testing.assert_array_equal(labels_a, labels_b)
    pixels = (np.asarray(a, np.float64) + 1.0) * 127.5  # the official map, inverted
    mean, std = (np.asarray(preprocessing[k]) for k in ("mean", "std"))
    expected = (pixels / 255.0 - mean) / std
    bound = 8 * np.finfo(np.float32).eps * np.maximum(np.abs(expected), 1 / std)
    assert np.all(np.abs(np.asarray(b, np.float64) - expected) <= bound)


def test_synthetic_input_repeats_the_streams_first_batch(data):
    """config.input.synthetic (a speed measurement): every step gets the batch the
    real stream starts with, unchanged, so the step runs without decoding."""
    config = fashion_mnist.get_config()
    config.input.synthetic = True
    spec = InputSpec.from_config(config, 4, False, objectives.get("classification"))
    assert spec.synthetic
    spec = dataclasses.replace(spec, image_size=28)
    real = ip.train_dataset(data, dataclasses.replace(spec, synthetic=False), batch_size=4)
    first = next(iter(real))
    batches = list(ip.train_dataset(data, spec, batch_size=4).take(N_TRAIN // 4 + 2))
    assert not np.array_equal(next(iter(real.skip(1)))[0], first[0])  # the stream moves on
    for images, labels in batches:
        np.testing.assert_array_equal(images, first[0])
        np.testing.assert_array_equal(labels, first[1])
