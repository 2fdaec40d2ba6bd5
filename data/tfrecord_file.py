"""TFRecord files written without TensorFlow: the framing of `tf.io.TFRecordWriter`,
byte for byte, so that writing a data directory from arrays (Fashion-MNIST, numpy
sources) never imports TensorFlow. Its import is about half the time of the whole
`tools/make_tfrecords.py --source=fashion_mnist` (6 of 13 seconds on 2 cores).

Each record is framed as

    uint64 length (little endian) | masked CRC32C of those 8 bytes |
    data | masked CRC32C of data

with CRC32C the Castagnoli CRC (reflected polynomial 0x82F63B78, initial value and
final xor 0xFFFFFFFF) and TensorFlow's mask ((crc >> 15 | crc << 17) + 0xA282EAD8 mod
2**32). zlib.crc32 is the other polynomial and no allowed dependency has CRC32C, so
`masked_crc32c` computes it with numpy, for many records at once: one table step per
byte position over every record still that long (records sorted by length, so those
are a prefix). A record longer than `PIECE` bytes is cut into a head of length % PIECE
bytes and pieces of PIECE bytes: the pieces' CRCs are computed together, then folded
into the head's state one piece at a time (CRC is linear: the state after a piece is
the state before it shifted by PIECE zero bytes, xor the piece's CRC from a zero
state), so a 10 MB record costs PIECE + length / PIECE numpy steps, not 10 million.

`write_records` writes a file; `TFRecordFile` writes one record at a time, framing
them in batches. Paths with a scheme (gs://, ram://) go through tf.io.gfile
(`files.open_file`). numpy's CRC32C runs at about 150 MB/s on one core, TensorFlow's
(native) at GB/s: `open_records` gives TensorFlow's writer, the same bytes, where
TensorFlow is imported already (a source of encoded images, whose checks decode
them: 30 KB JPEGs would otherwise spend a quarter of their time here).
"""

import sys

import numpy as np

from keras_vit_data import files

POLYNOMIAL = 0x82F63B78  # CRC32C (Castagnoli), reflected
MASK_DELTA = 0xA282EAD8
PIECE = 1024  # bytes of a record per CRC piece (see the module docstring)
BATCH_RECORDS = 4096  # records `TFRecordFile` frames at once
BATCH_BYTES = 16 << 20  # or about this many bytes


def _table():
    crc = np.arange(256, dtype=np.uint32)
    for _ in range(8):
        crc = np.where(crc & 1, (crc >> 1) ^ np.uint32(POLYNOMIAL), crc >> 1).astype(np.uint32)
    return crc


TABLE = _table()


def _update(buf, starts, lengths, state):
    """`state` (uint32, one per record) after feeding each record's bytes
    buf[starts[i] : starts[i] + lengths[i]] through the table (no initial value or
    final xor applied here)."""
    if not len(state):
        return state
    order = np.argsort(-lengths, kind="stable")
    starts, crc = starts[order], state[order]
    by_length = lengths[order]
    # active[j]: how many records are longer than j (a prefix of the sorted order)
    active = np.searchsorted(-by_length, -np.arange(by_length[0]), side="left")
    for j, k in enumerate(active):
        c = crc[:k]
        crc[:k] = TABLE[(c ^ buf[starts[:k] + j]) & 0xFF] ^ (c >> 8)
    out = np.empty_like(crc)
    out[order] = crc
    return out


def _shift_tables(nbytes):
    """Tables T (4, 256) such that the state after `nbytes` zero bytes fed from state s
    is T[0][s & 255] ^ T[1][s >> 8 & 255] ^ T[2][s >> 16 & 255] ^ T[3][s >> 24]."""
    basis = np.uint32(1) << np.arange(32, dtype=np.uint32)
    zeros = np.zeros(nbytes, np.uint8)
    shifted = _update(
        np.concatenate([zeros] * 32),
        np.arange(32, dtype=np.int64) * nbytes,
        np.full(32, nbytes, np.int64),
        basis,
    )
    tables = np.zeros((4, 256), np.uint32)
    values = np.arange(256, dtype=np.uint32)
    for t in range(4):
        for bit in range(8):
            tables[t] ^= np.where(values >> bit & 1, shifted[8 * t + bit], 0).astype(np.uint32)
    return tables


_SHIFT = _shift_tables(PIECE)


def _crc32c(buf, starts, lengths):
    """CRC32C (unmasked) of each record buf[starts[i] : starts[i] + lengths[i]]."""
    n = len(starts)
    pieces = lengths // PIECE
    heads = lengths - pieces * PIECE
    state = _update(buf, starts, heads, np.full(n, 0xFFFFFFFF, np.uint32))
    if pieces.any():
        owner = np.repeat(np.arange(n), pieces)
        first = np.cumsum(pieces) - pieces  # each record's first piece
        index = np.arange(len(owner)) - first[owner]  # the piece's place in its record
        piece_starts = starts[owner] + heads[owner] + index * PIECE
        piece_crcs = _update(
            buf,
            piece_starts,
            np.full(len(owner), PIECE, np.int64),
            np.zeros(len(owner), np.uint32),
        )
        for t in range(int(pieces.max())):
            rows = np.flatnonzero(pieces > t)
            s = state[rows]
            state[rows] = (
                _SHIFT[0][s & 0xFF]
                ^ _SHIFT[1][s >> 8 & 0xFF]
                ^ _SHIFT[2][s >> 16 & 0xFF]
                ^ _SHIFT[3][s >> 24]
                ^ piece_crcs[first[rows] + t]
            )
    return state ^ np.uint32(0xFFFFFFFF)


def _mask(crc):
    crc = crc.astype(np.uint64)
    rotated = ((crc >> 15) | (crc << 17)) & 0xFFFFFFFF
    return ((rotated + MASK_DELTA) & 0xFFFFFFFF).astype(np.uint32)


def masked_crc32c(records):
    """The masked CRC32C of each bytes of `records`, as TFRecord files store it
    (uint32 array)."""
    lengths = np.fromiter(map(len, records), np.int64, len(records))
    starts = np.cumsum(lengths) - lengths
    buf = np.frombuffer(b"".join(records), np.uint8)
    return _mask(_crc32c(buf, starts, lengths))


def frame(records):
    """The bytes of a TFRecord file of `records` (a list of bytes)."""
    n = len(records)
    if not n:
        return b""
    lengths = np.fromiter(map(len, records), np.int64, n)
    headers = lengths.astype("<u8").view(np.uint8)
    length_crcs = _mask(_crc32c(headers, np.arange(n, dtype=np.int64) * 8, np.full(n, 8)))
    data_crcs = masked_crc32c(records)
    heads = np.empty((n, 12), np.uint8)
    heads[:, :8] = headers.reshape(n, 8)
    heads[:, 8:] = length_crcs.astype("<u4").view(np.uint8).reshape(n, 4)
    heads = heads.tobytes()
    tails = data_crcs.astype("<u4").tobytes()
    parts = []
    for i, record in enumerate(records):
        parts += (heads[12 * i : 12 * i + 12], record, tails[4 * i : 4 * i + 4])
    return b"".join(parts)


class TFRecordFile:
    """A TFRecord file being written (`write`, then `close`, or a `with` block):
    records are framed in batches of BATCH_RECORDS or about BATCH_BYTES."""

    def __init__(self, path):
        self._context = files.open_file(path, "wb")
        self._file = self._context.__enter__()
        self._batch, self._bytes = [], 0

    def write(self, record):
        self._batch.append(record)
        self._bytes += len(record)
        if len(self._batch) >= BATCH_RECORDS or self._bytes >= BATCH_BYTES:
            self.flush()

    def flush(self):
        if self._batch:
            self._file.write(frame(self._batch))
            self._batch, self._bytes = [], 0

    def close(self):
        self.flush()
        self._context.__exit__(None, None, None)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is None:
            self.close()
        else:  # an error: the file is closed as it is, unfinished
            self._context.__exit__(kind, value, traceback)


def open_records(path):
    """A writer of the TFRecord file `path` (`write`, `close`, a `with` block):
    `tf.io.TFRecordWriter` where TensorFlow is imported already, else `TFRecordFile`;
    the same bytes."""
    if "tensorflow" in sys.modules:
        import tensorflow as tf

        return tf.io.TFRecordWriter(path)
    return TFRecordFile(path)


def write_records(path, records):
    """Writes `records` (bytes) as the TFRecord file `path`."""
    with TFRecordFile(path) as f:
        for record in records:
            f.write(record)
