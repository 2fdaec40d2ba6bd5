"""data/tfrecord_file.py: TFRecord framing without TensorFlow. Its CRC32C against
tensorboard's pure-Python one (an independent implementation), and its files against
TensorFlow's: read back by tf.data, byte for byte tf.io.TFRecordWriter's, and a
flipped byte is reported as corrupt (TensorFlow checks the CRCs we write)."""

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as reference

from keras_vit_data import tfrecord_file

# 0 and 1 bytes, around the piece size, and records of several pieces
LENGTHS = [0, 1, 2, 3, 7, 8, 9, 31, 100, 255, 256, 1023, 1024, 1025, 2048, 3000, 5121]


def _records(seed=0, lengths=LENGTHS):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, n, np.uint8).tobytes() for n in lengths]


def test_masked_crc32c_is_tensorboards():
    records = _records() + [b"\x00" * 40, b"\xff" * 40, b"123456789"]
    got = tfrecord_file.masked_crc32c(records)
    assert got.tolist() == [reference(r) for r in records]
    # one at a time (nothing to vectorise over) gives the same
    assert [int(tfrecord_file.masked_crc32c([r])[0]) for r in records] == got.tolist()


def test_crc32c_check_value():
    # CRC-32C of b"123456789" is 0xE3069283 (RFC 3720, B.4)
    buf = np.frombuffer(b"123456789", np.uint8)
    crc = tfrecord_file._crc32c(buf, np.array([0]), np.array([9]))
    assert int(crc[0]) == 0xE3069283


def test_a_file_is_tensorflows(tmp_path):
    records = _records(1) + _records(2, [5, 0, 12])
    ours, theirs = str(tmp_path / "ours.tfrecord"), str(tmp_path / "theirs.tfrecord")
    tfrecord_file.write_records(ours, records)
    with tf.io.TFRecordWriter(theirs) as w:
        for r in records:
            w.write(r)
    assert open(ours, "rb").read() == open(theirs, "rb").read()
    assert [r.numpy() for r in tf.data.TFRecordDataset(ours)] == records


def test_batches_make_one_file(tmp_path, monkeypatch):
    monkeypatch.setattr(tfrecord_file, "BATCH_RECORDS", 3)
    records = _records(3, [10, 0, 2000, 1, 1, 77, 5])
    path = str(tmp_path / "batched.tfrecord")
    tfrecord_file.write_records(path, records)
    assert open(path, "rb").read() == tfrecord_file.frame(records)
    assert [r.numpy() for r in tf.data.TFRecordDataset(path)] == records


def test_an_empty_file(tmp_path):
    path = str(tmp_path / "empty.tfrecord")
    tfrecord_file.write_records(path, [])
    assert open(path, "rb").read() == b""
    assert list(tf.data.TFRecordDataset(path)) == []


@pytest.mark.parametrize("where", ["length", "data", "data crc"])
def test_tensorflow_reports_a_flipped_byte(tmp_path, where):
    records = [b"first record", b"second record"]
    data = bytearray(tfrecord_file.frame(records))
    offset = {"length": 2, "data": 12 + 3, "data crc": 12 + len(records[0]) + 1}[where]
    data[offset] ^= 0x01
    path = tmp_path / "corrupt.tfrecord"
    path.write_bytes(bytes(data))
    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(path)))


def test_tensorflows_writer_where_tensorflow_is_imported(tmp_path):
    records = _records(4, [0, 9, 1500])
    path = str(tmp_path / "native.tfrecord")
    with tfrecord_file.open_records(path) as w:  # this test process has imported it
        assert isinstance(w, tf.io.TFRecordWriter)
        for r in records:
            w.write(r)
    assert open(path, "rb").read() == tfrecord_file.frame(records)
