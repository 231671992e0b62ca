"""The RecordBatch codec, checked byte for byte and by round trips."""

import struct
import sys

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

from tideway.native.partitioner import murmur2, partition_for_key
from tideway.protocol.errors import CorruptRecordError
from tideway.record import BatchBuilder, Compression, decode_records, read_header, validate_batches
from tideway.record.batch import count_records, stamp_batch
from tideway.record.varint import decode_varint, encode_varint


def test_one_record_batch_matches_the_v2_layout_byte_for_byte():
    builder = BatchBuilder()
    builder.append(1_700_000_000_000, None, b"a")
    data = builder.build()
    # Record: length 7, attributes 0, ts delta 0, offset delta 0, key -1, value len 1, "a", 0 headers.
    record = bytes([0x0E, 0x00, 0x00, 0x00, 0x01, 0x02]) + b"a" + b"\x00"
    after_crc = struct.pack(">hiqqqhii", 0, 0, 1_700_000_000_000, 1_700_000_000_000, -1, -1, -1, 1) + record
    expected = struct.pack(">qiib", 0, 49 + len(record), -1, 2) + struct.pack(">I", crc32c(after_crc)) + after_crc
    assert data == expected


@pytest.mark.parametrize(
    "value,encoded",
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (63, b"\x7e"), (64, b"\x80\x01"), (-65, b"\x81\x01"), (300, b"\xd8\x04")],
)
def test_zigzag_varints(value, encoded):
    assert encode_varint(value) == encoded
    assert decode_varint(encoded, 0) == (value, len(encoded))


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_varint_round_trip(value):
    assert decode_varint(encode_varint(value), 0)[0] == value


record_strategy = st.tuples(
    st.integers(min_value=0, max_value=2**40),
    st.one_of(st.none(), st.binary(max_size=300)),
    st.one_of(st.none(), st.binary(max_size=20_000)),
    st.lists(st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=20))), max_size=3),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(record_strategy, min_size=1, max_size=40), st.sampled_from(list(Compression)[:2] + [Compression.LZ4, Compression.ZSTD]))
def test_batches_round_trip_with_every_codec(records, codec):
    builder = BatchBuilder(codec)
    for timestamp, key, value, headers in records:
        builder.append(timestamp, key, value, headers)
    data = bytearray(builder.build())
    (header,) = validate_batches(data, batch_bytes_max=1 << 30, from_producer=True)
    assert header.record_count == len(records)
    assert header.compression == codec
    stamp_batch(data, 0, 1000, 7)  # broker-assigned fields sit outside the CRC
    validate_batches(data, batch_bytes_max=1 << 30, from_producer=True)
    decoded = decode_records(bytes(data))
    assert [(r.offset, r.timestamp_ms, r.key, r.value, [(k, v) for k, v in r.headers]) for r in decoded] == [
        (1000 + i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(records)
    ]
    assert read_header(data).leader_epoch == 7


def test_flipped_byte_fails_the_crc():
    builder = BatchBuilder()
    for i in range(10):
        builder.append(1, b"k", b"value %d" % i)
    data = bytearray(builder.build())
    data[70] ^= 0x40
    with pytest.raises(CorruptRecordError, match="CRC"):
        validate_batches(data, batch_bytes_max=1 << 20, from_producer=True)


def test_cut_short_and_oversized_batches_are_refused():
    builder = BatchBuilder()
    builder.append(1, None, b"x" * 1000)
    data = builder.build()
    with pytest.raises(CorruptRecordError, match="cut short"):
        validate_batches(data[:-1], batch_bytes_max=1 << 20, from_producer=True)
    with pytest.raises(CorruptRecordError) as info:
        validate_batches(data, batch_bytes_max=500, from_producer=True)
    assert info.value.too_large


def test_producer_batches_must_have_dense_offsets():
    builder = BatchBuilder()
    builder.append(1, None, b"x")
    builder.append(1, None, b"y")
    data = bytearray(builder.build())
    struct.pack_into(">i", data, 23, 5)  # lastOffsetDelta no longer count - 1
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(CorruptRecordError, match="last offset delta"):
        validate_batches(data, batch_bytes_max=1 << 20, from_producer=True)


@pytest.mark.parametrize(
    "key,expected",
    [
        (b"21", -973932308),
        (b"foobar", -790332482),
        (b"a-little-bit-long-string", -985981536),
        (b"a-little-bit-longer-string", -1486304829),
        (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        (b"abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key, expected):
    assert murmur2(key) == expected
    assert partition_for_key(key, 7) == (expected & 0x7FFFFFFF) % 7


_RECORDS = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=300)), st.one_of(st.none(), st.binary(max_size=40)),
              st.one_of(st.none(), st.lists(st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20))),
                                            max_size=2))),
    max_size=60)


@settings(max_examples=200, deadline=None)
@given(records=_RECORDS, already=st.integers(0, 3), size_max=st.integers(61, 3000), timestamp_step=st.integers(0, 100_000))
def test_extend_adds_what_append_would_within_the_size_and_an_empty_batch_takes_its_first_record(
        records, already, size_max, timestamp_step):
    def builder_with(run) -> BatchBuilder:
        builder = BatchBuilder()
        for i in range(already):  # records before the run, at an earlier time
            builder.append(1_700_000_000_000, None, b"before %d" % i)
        for value, key, headers in run:
            builder.append(timestamp, key, value, headers)
        return builder

    timestamp = 1_700_000_000_000 + timestamp_step
    by_extend = builder_with([])
    stop = by_extend.extend(timestamp, [(value, key, headers, None) for value, key, headers in records], 0, len(records), size_max)
    by_append = builder_with(records[:stop])
    assert by_extend.size_bytes == by_append.size_bytes
    if len(by_append):
        assert by_extend.build() == by_append.build()  # the same bytes as one append each
    if already == 0 and records:
        assert stop >= 1  # an empty batch takes its first record, whatever its size
    if stop > 1 or (stop and already):  # more than an empty batch's first record
        assert by_append.size_bytes <= size_max
    if stop < len(records):  # stopped early only because the next record would not fit
        assert builder_with(records[: stop + 1]).size_bytes > size_max


def test_count_records_gives_the_records_and_the_offset_after_the_last_whole_batch():
    def batch(base_offset: int, count: int) -> bytes:
        builder = BatchBuilder()
        for i in range(count):
            builder.append(1_700_000_000_000, None, b"v%d" % i)
        data = bytearray(builder.build())
        stamp_batch(data, 0, base_offset, 0)
        return bytes(data)

    two = batch(10, 3) + batch(13, 2)
    assert count_records(two) == (5, 15)
    assert count_records(two[:-1]) == (3, 13)  # the cut-short last batch is not counted
    assert count_records(b"") == (0, -1)


def test_markers_are_no_records_and_an_aborted_transactions_records_are_not_delivered_to_read_committed():
    from tideway.record.batch import ATTRIBUTE_TRANSACTIONAL
    from tideway.record.markers import build_marker, delivered_records

    def placed(data: bytes, base_offset: int) -> bytes:
        data = bytearray(data)
        stamp_batch(data, 0, base_offset, 0)
        return bytes(data)

    def transactional(producer_id: int, count: int) -> bytes:
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=0, flags=ATTRIBUTE_TRANSACTIONAL)
        for i in range(count):
            builder.append(1_700_000_000_000, None, b"v%d" % i)
        return builder.build()

    plain = BatchBuilder()
    plain.append(1_700_000_000_000, None, b"plain")
    # offsets 0-2: producer 7 (aborted), 3-4: producer 8 (committed), 5: 7's abort marker, 6: 8's commit, 7: plain
    data = (placed(transactional(7, 3), 0) + placed(transactional(8, 2), 3)
            + placed(build_marker(7, 0, commit=False, coordinator_epoch=0, timestamp_ms=1), 5)
            + placed(build_marker(8, 0, commit=True, coordinator_epoch=0, timestamp_ms=1), 6) + placed(plain.build(), 7))
    assert count_records(data) == (6, 8)  # the two markers are not counted; the offset after is past them
    assert delivered_records(data, [(7, 0)]) == 3  # producer 8's two and the plain one
    assert delivered_records(data, []) == 6


def test_lz4_and_zstd_without_their_libraries_say_what_to_install(monkeypatch):
    """The client distribution leaves lz4 and zstandard to its `compression` extra; gzip needs nothing."""
    from tideway.record.compression import Compression, compress, decompress

    assert decompress(Compression.GZIP, compress(Compression.GZIP, b"x" * 100)) == b"x" * 100
    monkeypatch.setitem(sys.modules, "zstandard", None)
    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    for codec in (Compression.LZ4, Compression.ZSTD):
        with pytest.raises(ImportError, match=r"pip install 'tideway\[compression\]'"):
            compress(codec, b"x")
        with pytest.raises(ImportError, match=r"tideway\[compression\]"):
            decompress(codec, b"x")
