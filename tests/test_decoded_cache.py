"""input.cache_decoded: the training records decoded once into memory and read by
position give the very batches of the stream that reads and decodes them (shuffled
across epochs, resumed, split across pipelines, with records that do not decode), and
what a cache cannot hold is an error that names it."""

import dataclasses

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
    np.testing.assert_array_equal(table.images.numpy()[:, 0, 0, 0], pixels)
    with pytest.raises(tf.errors.InvalidArgumentError):  # strict: fatal at the cache
        ip.train_dataset(
            data, dataclasses.replace(spec, strict=True, cache_decoded=True), batch_size=4
        )


def test_an_image_of_another_size_is_named(tmp_path):
    data = testing.data_with_bad_records(tmp_path, odd_size=(9, 17))
    spec = InputSpec(image_size=4, num_classes=24, crop="none", cache_decoded=True)
    message = r"record 9 of .*train-00000-of-00001\.tfrecord is 4x5, not 4x4 .*\(2 of 24 differ\)"
    with pytest.raises(ip.DataError, match=message):
        ip.train_dataset(data, spec, batch_size=4)


def test_a_split_over_the_cache_limit_is_refused(data, monkeypatch):
    monkeypatch.setattr(ip, "CACHE_MAX_BYTES", 96 * 28 * 28 * 3 - 1)  # one byte short
    with pytest.raises(ip.DataError, match=r"96 training images of 28x28 take .* GiB decoded"):
        ip.train_dataset(data, dataclasses.replace(SPEC, cache_decoded=True), batch_size=8)
    monkeypatch.setattr(ip, "CACHE_MAX_BYTES", 96 * 28 * 28 * 3)
    ip.train_dataset(data, dataclasses.replace(SPEC, cache_decoded=True), batch_size=8)


def test_the_data_service_turns_the_cache_off(caplog):
    with caplog.at_level("INFO", logger="trainers"):
        spec = InputSpec(cache_decoded=True, data_service="grpc://127.0.0.1:5000")
    assert not spec.cache_decoded
    assert "input.cache_decoded is off: input.data_service's workers decode" in caplog.text
    config = fashion_mnist.get_config()  # the cache on
    config.input.data_service = "grpc://127.0.0.1:5000"
    config_checks.check_input(config, None)  # no error: the service wins
