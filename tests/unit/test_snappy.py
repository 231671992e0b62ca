"""Snappy batches as Kafka clients write them (Java's xerial framing, or one raw block) decode to the same bytes;
a damaged one raises instead of yielding other bytes. Tideway's producers write Java's framing."""

import struct

import cramjam
import pytest

from tideway.record.compression import Compression, compress, decompress

DATA = b"".join(b"record %05d with some repeated text, repeated text, repeated text\n" % i for i in range(2000))


def _xerial(data: bytes, block_bytes: int = 32 << 10) -> bytes:
    out = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    for start in range(0, len(data), block_bytes):
        block = bytes(cramjam.snappy.compress_raw(data[start:start + block_bytes]))
        out += struct.pack(">i", len(block)) + block
    return out


def test_raw_and_java_framed_snappy_decode_to_the_same_bytes():
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(DATA))) == DATA
    assert decompress(Compression.SNAPPY, _xerial(DATA)) == DATA


def test_a_damaged_snappy_batch_raises():
    framed = _xerial(DATA)
    with pytest.raises(ValueError):
        decompress(Compression.SNAPPY, framed[:-10] + struct.pack(">i", 1 << 30))
    with pytest.raises(Exception):  # noqa: B017 - cramjam's own error for a damaged raw block
        decompress(Compression.SNAPPY, b"\xff\xff\xff\xff\x0f garbage")


def test_producers_write_snappy_in_javas_framing():
    assert Compression.parse("snappy") is Compression.SNAPPY
    assert compress(Compression.SNAPPY, DATA) == _xerial(DATA)
    assert decompress(Compression.SNAPPY, compress(Compression.SNAPPY, b"")) == b""
