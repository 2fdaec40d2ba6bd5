"""The tf.data pipeline: deterministic (resume = skip), exact global batches across
pipelines, corrupt shards skipped and counted, clear errors for bad data dirs."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
import trainer_testing as testing

from keras_vit_trainers import input_pipeline as ip
from keras_vit_trainers.input_spec import InputSpec

SPEC = InputSpec(image_size=28, seed=3, num_classes=4, crop="inception_crop", shuffle_buffer=100)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    testing.make_tiny_data(str(d), n_train=96, n_test=40, per_shard=32)
    return str(d)


def test_stream_is_deterministic_and_resumable(data):
    full = testing.take(ip.train_dataset(data, SPEC, batch_size=8), 30)  # > 2 epochs
    again = testing.take(ip.train_dataset(data, SPEC, batch_size=8), 30)
    resumed = testing.take(ip.train_dataset(data, SPEC, batch_size=8, start_step=17), 13)
    for (a, b), (c, d) in zip(full, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    for (a, b), (c, d) in zip(full[17:], resumed):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    x, _ = full[0]
    assert x.shape == (8, 28, 28, 3) and x.dtype == np.float32
    assert -1.0 <= x.min() and x.max() <= 1.0
    # epochs are reshuffled: epoch 0 and epoch 1 differ in order
    assert not np.array_equal(full[0][1], full[12][1]) or not np.array_equal(
        full[0][0], full[12][0]
    )


def test_pipelines_split_each_global_batch_exactly(data):
    """shard_by='examples': every global batch holds the examples one pipeline's has."""
    spec = dataclasses.replace(SPEC, shard_by="examples")
    single = testing.take(ip.train_dataset(data, spec, batch_size=8), 4)
    parts = []
    for p in range(2):
        ctx = tf.distribute.InputContext(
            num_input_pipelines=2, input_pipeline_id=p, num_replicas_in_sync=2
        )
        parts.append(
            testing.take(
                ip.train_dataset(data, spec, batch_size=4, global_batch_size=8, input_context=ctx),
                4,
            )
        )
    for step in range(4):
        merged = np.concatenate([parts[0][step][0], parts[1][step][0]])
        key = lambda a: np.sort(a.reshape(len(a), -1).sum(1))
        np.testing.assert_allclose(key(merged), key(single[step][0]), rtol=1e-6)


def test_eval_pads_to_fixed_batches_without_losing_examples(data):
    ds = ip.eval_dataset(data, SPEC, batch_size=16, drop_remainder=True)
    weights = np.concatenate([w.numpy() for _, _, w in ds])
    assert len(weights) == 48 and weights.sum() == 40


def test_corrupt_shard_is_skipped_and_counted(data, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(data, bad)
    shard = bad / "train-00001-of-00003.tfrecord"
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # flip a byte in the middle: CRC mismatch
    shard.write_bytes(bytes(raw))
    split = ip.get_split(str(bad), "train")
    assert split.corrupt_files == ("train-00001-of-00003.tfrecord",)
    assert 0 < split.skipped_records < 32 and split.num_examples == 96 - split.skipped_records
    n = sum(
        len(y) for _, y in ip.train_dataset(str(bad), SPEC, batch_size=1).take(split.num_examples)
    )
    assert n == split.num_examples
    with pytest.raises(ip.DataError, match="corrupt shard"):
        ip.get_split(str(bad), "train", strict=True)
    # The few-shot evaluator checks its splits as config.input says too.
    from keras_vit_trainers import fewshot_evaluator

    lenient = fewshot_evaluator.FewShotEvaluator(
        str(bad), InputSpec(image_size=28), train_split="train"
    )
    assert lenient._split("train", None).num_examples == split.num_examples
    strict = fewshot_evaluator.FewShotEvaluator(
        str(bad), InputSpec(image_size=28, strict=True), train_split="train"
    )
    with pytest.raises(ip.DataError, match="corrupt shard"):
        strict._split("train", None)


def test_bad_data_dirs_name_the_directory(tmp_path):
    with pytest.raises(ip.DataError, match="no such directory"):
        ip.read_manifest(str(tmp_path / "missing"))
    with pytest.raises(ip.DataError, match=f"--data_dir={tmp_path}: no manifest.json"):
        ip.read_manifest(str(tmp_path))
    with pytest.raises(ip.DataError, match="--data_dir is required"):
        ip.read_manifest(None)


def test_resume_past_records_that_do_not_decode_sees_the_uninterrupted_batches(tmp_path):
    data = testing.data_with_bad_records(tmp_path)
    spec = InputSpec(image_size=4, seed=1, num_classes=24, crop="none", flip=False)
    spec = dataclasses.replace(spec, shuffle_buffer=8)
    kw = dict(batch_size=4)
    steps = 8  # an epoch is 6 steps of 4 records
    full = testing.take(ip.train_dataset(data, spec, **kw), steps)
    # Shuffled in windows of 8 records, record 5 is read in steps 0-1, record 14 in 2-3:
    # resume after one, and after both.
    for start in (2, 4):
        resumed = testing.take(ip.train_dataset(data, spec, start_step=start, **kw), steps - start)
        for step, ((x, y), (rx, ry)) in enumerate(zip(full[start:], resumed), start):
            np.testing.assert_array_equal(ry, y, err_msg=f"labels at step {step}")
            np.testing.assert_array_equal(rx, x, err_msg=f"images at step {step}")
    # Epoch 0: every good record once; each failed one replaced by a good record of its
    # own batch, so that the batch keeps its 4 rows.
    epoch = np.concatenate([y for _, y in full[:6]])
    assert sorted(set(epoch)) == sorted(set(range(24)) - {5, 14})
    assert len(epoch) == 24 and sum(len(set(y)) < 4 for _, y in full[:6]) in (1, 2)
    for x, y in full:  # the image is the record's own (pixels i <-> label i)
        np.testing.assert_allclose(x[:, 0, 0, 0], y / 127.5 - 1.0, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError):
        testing.take(ip.train_dataset(data, dataclasses.replace(spec, strict=True), **kw), 6)


def test_eval_gives_records_that_do_not_decode_weight_0_in_place(tmp_path):
    data = testing.data_with_bad_records(tmp_path)
    batches = list(
        ip.eval_dataset(data, InputSpec(image_size=4, num_classes=24), split="train", batch_size=5)
    )
    weights = np.concatenate([w for _, _, w in batches])
    labels = np.concatenate([y for _, y, _ in batches])
    assert len(weights) == 25  # 24 records and one padding row
    np.testing.assert_array_equal(np.flatnonzero(weights == 0), [5, 14, 24])
    good = weights > 0
    np.testing.assert_array_equal(labels[good], np.delete(np.arange(24), [5, 14]))


def test_failed_rows_take_the_good_rows_of_their_batch_in_turn():
    images = tf.constant([[0.0], [1.0], [2.0], [3.0], [4.0]])
    ok = tf.constant([False, True, False, False, True])
    filled, labels = ip.fill_failed_rows(images, tf.range(5), ok)
    np.testing.assert_array_equal(labels, [1, 1, 4, 1, 4])
    np.testing.assert_array_equal(filled[:, 0], [1, 1, 4, 1, 4])
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="none of the 5 records of a batch decode"
    ):
        ip.fill_failed_rows(images, tf.range(5), tf.zeros([5], tf.bool))
