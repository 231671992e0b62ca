"""The record decoder in C (tideway/record/_records.c) against the Python one it mirrors.

The C decoder is a fast path: for a well-formed records section it must give
exactly the Python decoder's records, and for anything else it must give None
(so that the Python decoder decides), never a different answer and never a
crash. The bytes it reads come from tenants' producers, so the malformed
cases matter as much as the good ones.
"""

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tideway.protocol.errors import CorruptRecordError
from tideway.record import BatchBuilder, decode_records
from tideway.record import batch as batch_module
from tideway.record.batch import BATCH_HEADER_BYTES, Record, _decode_record_section, read_header
from tideway.record.varint import encode_varint

fast = batch_module._decode_fast


def test_the_c_decoder_is_built():
    # setup.py builds it with `pip install -e .` (infra/setup.sh); without it every consumer and
    # queue delivery decodes in Python, about ten times slower a record.
    assert fast is not None, "tideway/record/_records.c was not compiled: run infra/setup.sh (needs gcc and Python's headers)"


needs_fast = pytest.mark.skipif(fast is None, reason="the C decoder is not built")

_HEADERS = st.lists(st.tuples(st.text(max_size=12), st.none() | st.binary(max_size=20)), max_size=3)
_RECORDS = st.lists(
    st.tuples(st.integers(-(2**40), 2**40), st.none() | st.binary(max_size=40), st.none() | st.binary(max_size=300), _HEADERS),
    min_size=1, max_size=30,
)


def _section(records) -> tuple[bytes, int, int, int]:
    builder = BatchBuilder()
    for timestamp, key, value, headers in records:
        builder.append(1_700_000_000_000 + timestamp, key, value, headers or None)
    data = builder.build()
    header = read_header(data)
    return data[BATCH_HEADER_BYTES:], header.base_offset, header.base_timestamp, header.record_count


def _python(section: bytes, base_offset: int, base_timestamp: int, count: int):
    try:
        return _decode_record_section(section, base_offset, base_timestamp, count)
    except (IndexError, ValueError) as exc:
        return type(exc)


@needs_fast
@settings(max_examples=300, deadline=None)
@given(_RECORDS, st.integers(0, 2**62))
def test_well_formed_sections_decode_as_in_python(records, base_offset):
    section, _, base_timestamp, count = _section(records)
    decoded = fast(section, base_offset, base_timestamp, count, Record)
    assert decoded is not None
    assert decoded == _decode_record_section(section, base_offset, base_timestamp, count)
    assert [(r.key, r.value, r.headers) for r in decoded] == [(k, v, tuple(h)) for _, k, v, h in records]


@needs_fast
@settings(max_examples=1000, deadline=None)
@given(_RECORDS, st.data())
def test_damaged_sections_give_the_python_records_or_none(records, data):
    section, base_offset, base_timestamp, count = _section(records)
    damaged = bytearray(section)
    for _ in range(data.draw(st.integers(1, 4))):
        kind = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(0, max(len(damaged) - 1, 0)))
        if kind == "flip" and damaged:
            damaged[at] ^= data.draw(st.integers(1, 255))
        elif kind == "cut":
            del damaged[at:]
        else:
            damaged[at:at] = data.draw(st.binary(min_size=1, max_size=12))
    count = data.draw(st.sampled_from([count, count + 1, max(count - 1, 0), 2**31 - 1, -1]))
    damaged = bytes(damaged)
    decoded = fast(damaged, base_offset, base_timestamp, count, Record)
    if decoded is not None:  # it decided: the Python decoder must agree, records and all
        assert decoded == _python(damaged, base_offset, base_timestamp, count)


@needs_fast
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(-5, 40))
def test_arbitrary_bytes_give_the_python_records_or_none(section, count):
    decoded = fast(section, 0, 0, count, Record)
    if decoded is not None:
        assert decoded == _python(section, 0, 0, count)


def _record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


@needs_fast
@pytest.mark.parametrize("section,count", [
    # A varint wider than 64 bits (the Python decoder makes a big int of the offset delta).
    (_record(b"\x00\x00" + b"\xff" * 9 + b"\x7f" + b"\x01\x01\x00"), 1),
    # Offsets past 2**63 once the base is added.
    (_record(b"\x00\x00" + encode_varint(2**62) + b"\x01\x01\x00"), 1),
    # A header name that is not UTF-8.
    (_record(b"\x00\x00\x00\x01\x01" + encode_varint(1) + encode_varint(2) + b"\xff\xfe" + b"\x01"), 1),
    # More records announced than the bytes could hold.
    (_record(b"\x00\x00\x00\x01\x01\x00"), 5),
])
def test_what_the_c_decoder_leaves_to_python(section, count):
    assert fast(section, 2**62, 0, count, Record) is None


@needs_fast
def test_decode_records_refuses_a_malformed_batch_with_the_fast_path_on():
    builder = BatchBuilder()
    builder.append(1, b"k", os.urandom(50))
    data = bytearray(builder.build())
    data[BATCH_HEADER_BYTES] = 0x7F  # the first record's length: far past the batch's end
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data))


def test_decode_records_falls_back_to_python_without_the_c_decoder(monkeypatch):
    builder = BatchBuilder()
    builder.append(5, b"k", b"v", [("h", b"1")])
    data = builder.build()
    with_fast = decode_records(data)
    monkeypatch.setattr(batch_module, "_decode_fast", None)
    assert decode_records(data) == with_fast == [Record(0, 5, b"k", b"v", (("h", b"1"),))]
