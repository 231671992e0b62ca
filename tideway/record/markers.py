"""Transaction markers: the control batches that end a transaction in each partition it wrote to (Kafka's
format, so Kafka clients read them as their brokers' own).

A marker is a batch with the transactional and control attributes, the producer's id and epoch, no sequence,
and one record: its key is (version int16 = 0, type int16: 0 abort, 1 commit), its value (version int16 = 0,
coordinator epoch int32). It takes an offset like any batch and is never delivered as a message.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from tideway.protocol.errors import CorruptRecordError
from tideway.record.batch import (
    ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL,
    BatchBuilder,
    BatchHeader,
    decode_records,
    iter_batches,
    read_header,
)

__all__ = ["ABORT", "COMMIT", "AbortedFilter", "Marker", "build_marker", "delivered_records", "is_marker", "is_transactional", "read_marker",
           "readable_batches"]

ABORT, COMMIT = 0, 1
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")


class Marker(NamedTuple):
    commit: bool
    coordinator_epoch: int


def build_marker(producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int,
                 timestamp_ms: int) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                           flags=ATTRIBUTE_TRANSACTIONAL | ATTRIBUTE_CONTROL)
    builder.append(timestamp_ms, _KEY.pack(0, COMMIT if commit else ABORT), _VALUE.pack(0, coordinator_epoch))
    return builder.build()


def is_marker(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTRIBUTE_CONTROL)


def is_transactional(header: BatchHeader) -> bool:
    return bool(header.attributes & ATTRIBUTE_TRANSACTIONAL)


def read_marker(buffer, position: int = 0) -> Marker:
    """The marker of the control batch at ``position``; CorruptRecordError if it is not one Tideway can read."""
    records = decode_records(buffer, position)
    if len(records) != 1 or records[0].key is None or len(records[0].key) < _KEY.size:
        raise CorruptRecordError("a control batch without one marker record")
    _version, kind = _KEY.unpack_from(records[0].key)
    if kind not in (ABORT, COMMIT):
        raise CorruptRecordError(f"a control record of unknown type {kind}")
    value = records[0].value or b""
    coordinator_epoch = _VALUE.unpack_from(value)[1] if len(value) >= _VALUE.size else -1
    return Marker(kind == COMMIT, coordinator_epoch)


class AbortedFilter:
    """Which batches of a fetch answer a reader delivers, as Kafka's clients decide it: never a control batch (a
    marker), nor a transactional batch of a producer whose transaction the answer names as aborted (``aborted``:
    (producer id, first offset) pairs), from that first offset up to the producer's abort marker.

    Batches are given in offset order, every one of them (markers included), to ``delivers``."""

    __slots__ = ("_aborting", "_next", "_pending")

    def __init__(self, aborted=()) -> None:
        self._pending = sorted(aborted, key=lambda txn: txn[1])
        self._next = 0
        self._aborting: set[int] = set()

    def delivers(self, header: BatchHeader) -> bool:
        pending = self._pending
        while self._next < len(pending) and pending[self._next][1] <= header.base_offset + header.last_offset_delta:
            self._aborting.add(pending[self._next][0])
            self._next += 1
        if header.attributes & ATTRIBUTE_CONTROL:
            self._aborting.discard(header.producer_id)  # its transaction ends here
            return False
        return not (header.attributes & ATTRIBUTE_TRANSACTIONAL and header.producer_id in self._aborting)


def readable_batches(data, aborted=()):
    """(position, base offset, size) of each batch of ``data`` a reader delivers (see AbortedFilter)."""
    keep = AbortedFilter(aborted)
    for position, base_offset, size in iter_batches(data):
        if keep.delivers(read_header(data, position)):
            yield position, base_offset, size


def delivered_records(data, aborted) -> int:
    """How many records of a fetch answer's ``data`` a read_committed reader keeps (what it was delivered)."""
    return sum(read_header(data, position).record_count for position, _base, _size in readable_batches(data, aborted))
