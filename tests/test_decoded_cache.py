"""input.cache_decoded: the training records decoded once into memory and read by
position give the very batches of the stream that reads and decodes them (shuffled
across epochs, resumed, split across pipelines, with records that do not decode), and
what a cache cannot hold is an error that names it."""

import dataclasses
import re

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing

from keras_vit_configs import fashion_mnist
from keras_vit_trainers import config_checks
from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers.input_spec import InputSpec

SPEC = InputSpec(image_size=20, seed=5, num_classes=4, crop="inception_crop", shuffle_buffer=40)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d), n_train=96, n_test=8, per_shard=20)  # 5 shards
    return str(d)


def assert_same_batches(cached, decoded, what):
    assert len(cached) == len(decoded)
    for step, ((x, y), (cx, cy)) in enumerate(zip(decoded, cached)):
        np.testing.assert_array_equal(cy, y, err_msg=f"{what}: labels at step {step}")
        np.testing.assert_array_equal(cx, x, err_msg=f"{what}: images at step {step}")


def both(data, spec, steps, **kw):
    """(cached, decoded): `steps` batches of each stream."""
    cached = ip.train_dataset(data, dataclasses.replace(spec, cache_decoded=True), **kw)
    return testing.take(cached, steps), testing.take(ip.train_dataset(data, spec, **kw), steps)


@pytest.mark.parametrize("start_step", [0, 7])
def test_cached_stream_is_the_decoded_stream(data, start_step):
    # 30 steps of 8: 2.5 epochs of 96, each epoch in its own file order and windows.
    cached, decoded = both(data, SPEC, 30 - start_step, batch_size=8, start_step=start_step)
    assert_same_batches(cached, decoded, f"from step {start_step}")
    assert not np.array_equal(decoded[0][1], decoded[12][1])  # epochs reshuffled


@pytest.mark.parametrize("shard_by", ["examples", "files"])
def test_each_pipeline_caches_and_reads_its_own_share(data, shard_by):
    spec = dataclasses.replace(SPEC, shard_by=shard_by)
    for p in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=p, num_replicas_in_sync=2
        )
        kw = dict(batch_size=4, global_batch_size=8, input_context=ctx, start_step=3)
        assert_same_batches(*both(data, spec, 12, **kw), f"{shard_by}, pipeline {p}")


def test_records_that_do_not_decode_are_filled_as_without_the_cache(tmp_path):
    data = testing.data_with_bad_records(tmp_path)
    spec = InputSpec(image_size=4, seed=1, num_classes=24, crop="none", shuffle_buffer=8)
    for start in (0, 3):
        cached, decoded = both(data, spec, 8 - start, batch_size=4, start_step=start)
        assert_same_batches(cached, decoded, f"from step {start}")
    table = ip.decoded_table([(f"{data}/train-00000-of-00001.tfrecord", 0, 24)], spec)
    np.testing.assert_array_equal(np.flatnonzero(~table.ok.numpy()), [5, 14])
    pixels = np.where(table.ok.numpy(), np.arange(24), 0)  # record i: pixels i, or zeros
    firsts = [table.image(tf.constant(p, tf.int64)).numpy()[0, 0, 0] for p in range(24)]
    np.testing.assert_array_equal(firsts, pixels)
    with pytest.raises(tf.errors.InvalidArgumentError):  # strict: fatal at the cache
        ip.train_dataset(
            data, dataclasses.replace(spec, strict=True, cache_decoded=True), batch_size=4
        )


def test_images_of_several_sizes_are_cached_at_their_own(tmp_path):
    # Records 9 and 17 are 4x5 among 4x4: kept at their size, the crops and resizes of
    # the stream that decodes them see the very arrays it decodes.
    data = testing.data_with_bad_records(tmp_path, odd_size=(9, 17))
    for crop in ("none", "inception_crop"):
        spec = InputSpec(image_size=4, seed=2, num_classes=24, crop=crop, shuffle_buffer=8)
        cached, decoded = both(data, spec, 7, batch_size=4, start_step=1)
        assert_same_batches(cached, decoded, crop)
    table = ip.decoded_table([(f"{data}/train-00000-of-00001.tfrecord", 0, 24)], spec)
    for p in (8, 9, 17):
        image = table.image(tf.constant(p, tf.int64)).numpy()
        assert image.shape == ((4, 5, 3) if p in (9, 17) else (4, 4, 3))
        np.testing.assert_array_equal(image, np.full(image.shape, p, np.uint8))


def test_a_split_over_the_cache_limit_steps_aside(data, monkeypatch, caplog):
    spec = dataclasses.replace(SPEC, cache_decoded=True)
    monkeypatch.setattr(ip, "CACHE_MAX_BYTES", 96 * 28 * 28 * 3 - 1)  # one byte short
    with caplog.at_level("INFO", logger="trainers"):
        assert ip.decoded_table(_share(data), spec) is None
    assert "input.cache_decoded steps aside: the 96 training images take about" in caplog.text
    # the stream that reads and decodes every record, as without the cache
    cached, decoded = both(data, SPEC, 3, batch_size=8)
    assert_same_batches(cached, decoded, "over the limit")
    monkeypatch.setattr(ip, "CACHE_MAX_BYTES", 96 * 28 * 28 * 3)
    table = ip.decoded_table(_share(data), spec)
    assert table is not None and table.images.shape == (96 * 28 * 28 * 3,)


def test_several_sizes_over_the_limit_step_aside_while_decoded(tmp_path, monkeypatch, caplog):
    # The first image (4x4) times 24 fits; the two 4x5 images take the split over.
    data = testing.data_with_bad_records(tmp_path, bad=(-1, -1), odd_size=(9, 17))
    spec = InputSpec(image_size=4, num_classes=24, crop="none", cache_decoded=True)
    monkeypatch.setattr(ip, "CACHE_BATCH", 8)
    monkeypatch.setattr(ip, "CACHE_MAX_BYTES", 24 * 4 * 4 * 3 + 1)
    with caplog.at_level("INFO", logger="trainers"):
        assert ip.decoded_table(_share(data), spec) is None
    assert "steps aside: the 24 training images take over" in caplog.text


def _share(data):
    """Every record of a directory's training split, as (shard, first, count) triples."""
    info = ip.get_split(data, "train")
    return [(f, 0, n) for f, n in zip(info.files, info.counts)]


def test_the_data_service_turns_the_cache_off(caplog):
    with caplog.at_level("INFO", logger="trainers"):
        spec = InputSpec(cache_decoded=True, data_service="grpc://127.0.0.1:5000")
    assert not spec.cache_decoded
    assert "input.cache_decoded is off: input.data_service's workers decode" in caplog.text
    config = fashion_mnist.get_config()  # the cache on
    config.input.data_service = "grpc://127.0.0.1:5000"
    config_checks.check_input(config, None)  # no error: the service wins


def test_the_demo_config_trains_on_a_folder_of_mixed_sizes(tmp_path):
    # train/ + val/ folders of 28-90 px PNGs, converted as docs/finetune_your_images.md
    # says; configs/fashion_mnist.py (the cache on) at the tests' tiny model.
    from keras_vit_data import writer

    rng = np.random.default_rng(0)
    root = tmp_path / "images"
    for split, n in (("train", 12), ("val", 4)):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                height, width = rng.integers(28, 91, 2)
                pixels = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
                (root / split / c / f"{i}.png").write_bytes(tf.io.encode_png(pixels).numpy())
    data = str(tmp_path / "data")
    writer.make_tfrecords(f"folder:{root}", data, progress=False)
    run_dir = str(tmp_path / "run")
    result = testing.run(
        testing.trainer_cmd(
            "pretrain",
            data,
            run_dir,
            "--config.total_steps=2",
            "--config.checkpoint_every=2",
            "--config.batch_size=8",
            "--config.input.shuffle_buffer=24",
        )
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(
        r"input.cache_decoded: 24 images \(\d+ sizes\) decoded into memory", result.stderr
    )
