"""Idempotent producers: which batches each producer already wrote to a partition.

Every batch from an idempotent producer carries its producer id, epoch and
the sequence number of its first record; sequences count records per
partition from 0. The table keeps, per producer, the last sequence written
and the last ``RECENT_BATCHES_MAX`` batches, so a batch resent after a lost
answer is recognised and answered with the offsets it got the first time
instead of being written twice.

It is derived from the log (batch headers hold every field), so followers
maintain it as they copy batches and a replica that truncates rebuilds it;
``producer-snapshot`` keeps it across a clean restart without a log scan.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass, field

import msgspec
from tideway_server.brokers.storage.files import take_snapshot, write_atomically

from tideway.protocol import errors
from tideway.protocol.messages import RECENT_BATCHES_MAX
from tideway.record.batch import ATTRIBUTE_CONTROL, BatchHeader

__all__ = ["ProducerStateTable", "RECENT_BATCHES_MAX"]

SNAPSHOT_FILE = "producer-snapshot"


@dataclass
class ProducerEntry:
    epoch: int
    last_sequence: int
    # (first sequence, last sequence, base offset) of recent batches, oldest first
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT_BATCHES_MAX))


class _Snapshot(msgspec.Struct):
    end_offset: int
    producers: dict[int, tuple[int, int, list[tuple[int, int, int]]]]


class ProducerStateTable:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, SNAPSHOT_FILE)
        self.producers: dict[int, ProducerEntry] = {}

    def check(self, header: BatchHeader) -> int | None:
        """For a producer batch about to be appended: the base offset it already
        has if it is a duplicate, else None. Raises when it must be refused."""
        if header.producer_id < 0:
            return None
        entry = self.producers.get(header.producer_id)
        if entry is None:
            return None  # first batch we see from it (or its state expired): accept
        if header.producer_epoch < entry.epoch:
            raise errors.InvalidProducerEpochError(
                f"producer {header.producer_id} epoch {header.producer_epoch} is older than {entry.epoch}"
            )
        if header.base_sequence < 0:
            return None  # a coordinator's transactional write (offsets in a transaction): no sequence to check
        if header.producer_epoch > entry.epoch:
            if header.base_sequence != 0:
                raise errors.OutOfOrderSequenceError(f"a new producer epoch must start at sequence 0, got {header.base_sequence}")
            return None
        last_sequence = header.base_sequence + header.last_offset_delta  # = record_count - 1, unless compacted
        for first, last, base_offset in entry.recent:
            if first == header.base_sequence and last == last_sequence:
                return base_offset
        if header.base_sequence == entry.last_sequence + 1:
            return None
        if header.base_sequence <= entry.last_sequence:
            raise errors.DuplicateSequenceError(
                f"batch with sequences {header.base_sequence}..{last_sequence} of producer {header.producer_id} "
                "was written too long ago to tell its offsets"
            )
        raise errors.OutOfOrderSequenceError(
            f"producer {header.producer_id} sent sequence {header.base_sequence}, expected {entry.last_sequence + 1}"
        )

    def update(self, header: BatchHeader) -> None:
        """Record a batch that is now in the log (header with its final base offset). A transaction's marker (a
        control batch) has no sequence; one with a newer epoch (the coordinator fenced the producer) makes that
        epoch the producer's, so the fenced instance's writes are refused from then on."""
        if header.producer_id < 0:
            return
        if header.attributes & ATTRIBUTE_CONTROL or header.base_sequence < 0:
            entry = self.producers.get(header.producer_id)
            if entry is None or header.producer_epoch > entry.epoch:
                self.producers[header.producer_id] = ProducerEntry(header.producer_epoch, -1)
            return
        last_sequence = header.base_sequence + header.last_offset_delta  # = record_count - 1, unless compacted
        entry = self.producers.get(header.producer_id)
        if entry is None or header.producer_epoch > entry.epoch:
            entry = self.producers[header.producer_id] = ProducerEntry(header.producer_epoch, last_sequence)
        entry.last_sequence = last_sequence
        entry.recent.append((header.base_sequence, last_sequence, header.base_offset))

    def clear(self) -> None:
        self.producers = {}

    def write_snapshot(self, end_offset: int) -> None:
        snapshot = _Snapshot(
            end_offset=end_offset,
            producers={pid: (e.epoch, e.last_sequence, list(e.recent)) for pid, e in self.producers.items()},
        )
        write_atomically(self.path, msgspec.msgpack.encode(snapshot), sync_directory=False)

    def load_snapshot(self, end_offset: int) -> bool:
        """Load the snapshot if it covers exactly ``end_offset``; consume it either way."""
        snapshot = take_snapshot(self.path, _Snapshot, end_offset)
        if snapshot is None:
            return False
        self.producers = {
            pid: ProducerEntry(epoch, last, deque((tuple(r) for r in recent), maxlen=RECENT_BATCHES_MAX))
            for pid, (epoch, last, recent) in snapshot.producers.items()
        }
        return True
