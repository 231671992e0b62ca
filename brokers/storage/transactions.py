"""Transactions as one partition sees them: which producers have a transaction open here (from its first
transactional batch to its marker), and which ended in an abort (their records stay in the log, and readers in
``read_committed`` drop them).

The last stable offset (LSO) is the first offset of the oldest open transaction, or the high watermark when
none is open: a ``read_committed`` reader stops there, since what follows may still be aborted. Each aborted
transaction is kept as (producer id, first offset, the abort marker's offset), so a fetch can name the ones
its records overlap (Kafka's FetchResponse ``aborted_transactions``).

Like the producer table it is derived from the log (batch headers, and the marker record of control batches),
so followers keep it as they copy batches, a replica that truncates rebuilds it, and ``transaction-snapshot``
keeps it across a clean restart without a log scan.
"""

from __future__ import annotations

import os
from bisect import bisect_left
from typing import NamedTuple

import msgspec
from tideway_server.brokers.storage.files import take_snapshot, write_atomically

from tideway.record.batch import ATTRIBUTE_CONTROL, ATTRIBUTE_TRANSACTIONAL, BatchHeader
from tideway.record.markers import Marker

__all__ = ["AbortedTransaction", "TransactionIndex"]

SNAPSHOT_FILE = "transaction-snapshot"


class AbortedTransaction(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int  # the abort marker's offset


class _Snapshot(msgspec.Struct):
    end_offset: int
    ongoing: dict[int, int]
    aborted: list[tuple[int, int, int]]


class TransactionIndex:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, SNAPSHOT_FILE)
        self.ongoing: dict[int, int] = {}  # producer id -> first offset of its open transaction here
        self.aborted: list[AbortedTransaction] = []  # in the order of their markers (by last offset)
        self._aborted_ends: list[int] = []  # their last offsets, for bisecting

    def observe(self, header: BatchHeader, marker: Marker | None = None) -> None:
        """A batch now in the log (its final offsets); ``marker`` read from it when it is a control batch."""
        if header.producer_id < 0 or not header.attributes & ATTRIBUTE_TRANSACTIONAL:
            return
        if not header.attributes & ATTRIBUTE_CONTROL:
            self.ongoing.setdefault(header.producer_id, header.base_offset)
            return
        first = self.ongoing.pop(header.producer_id, None)
        if marker is not None and not marker.commit and first is not None:
            self.aborted.append(AbortedTransaction(header.producer_id, first, header.base_offset))
            self._aborted_ends.append(header.base_offset)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest open transaction; None when none is open."""
        return min(self.ongoing.values(), default=None)

    def last_stable_offset(self, high_watermark: int) -> int:
        first = self.first_unstable_offset()
        return high_watermark if first is None or first > high_watermark else first

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        """Aborted transactions with records in [start, end): what a read of that range must drop."""
        slot = bisect_left(self._aborted_ends, start)
        return [txn for txn in self.aborted[slot:] if txn.first_offset < end]

    def forget_below(self, start: int) -> None:
        """The log starts at ``start`` now (retention, deleted records): aborted transactions ending below go."""
        slot = bisect_left(self._aborted_ends, start)
        if slot:
            del self.aborted[:slot]
            del self._aborted_ends[:slot]

    def clear(self) -> None:
        self.ongoing = {}
        self.aborted = []
        self._aborted_ends = []

    def write_snapshot(self, end_offset: int) -> None:
        snapshot = _Snapshot(end_offset=end_offset, ongoing=self.ongoing, aborted=[tuple(t) for t in self.aborted])
        write_atomically(self.path, msgspec.msgpack.encode(snapshot), sync_directory=False)

    def load_snapshot(self, end_offset: int) -> bool:
        """Load the snapshot if it covers exactly ``end_offset``; consume it either way."""
        snapshot = take_snapshot(self.path, _Snapshot, end_offset)
        if snapshot is None:
            return False
        self.ongoing = dict(snapshot.ongoing)
        self.aborted = [AbortedTransaction(*t) for t in snapshot.aborted]
        self._aborted_ends = [t.last_offset for t in self.aborted]
        return True
