"""Log compaction: keep the latest record of every key (cleanup.policy=compact).

The cleaner works on closed segments only (never the active one), in three
steps so that produce and fetch never wait for it:

1. ``plan`` (event-loop thread): note the closed segments and how far the
   active segment reaches right now.
2. ``build`` (a worker thread): read everything once to find each key's
   latest offset, then write cleaned copies of the closed segments
   (``.log.cleaned``): batches whose records all survive are copied byte for
   byte, others are rebuilt with the survivors at their original offsets, empty
   ones are dropped. Tombstones (null values) older than delete.retention.ms
   go too. Consecutive segments whose cleaned contents fit in segment.bytes
   together go into one copy (named after the first), so a log that rolls
   often does not pile up small files. The originals are only read (pread), so
   readers are unaffected.
3. ``swap`` (event-loop thread): replace each group of segments still part of
   the log with its cleaned copy. The copy is renamed ``.log.swap-END``, the
   originals are deleted, and the copy is renamed ``.log``; a crash in between
   leaves that file, which the log finishes putting in place when it
   opens (``Log._load``: it deletes the segments the copy covers first). A
   reader sees the old segments or the new one, and both hold the latest value
   of every key.

Offsets never change; compaction leaves gaps, which readers skip.

Transactions (Kafka's rules): only segments below the first open transaction are cleaned (their
transactions are all decided); a transaction's records count for their keys only once it committed (an
open or aborted write never shadows a committed value); an aborted transaction's records are dropped; markers
(control batches) are always kept, so a partition rebuilt from its log knows how each transaction ended.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from tideway_server.brokers.storage.files import fsync_directory
from tideway_server.brokers.storage.log import Log
from tideway_server.brokers.storage.segment import Segment

from tideway.record.batch import (
    ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL,
    BatchHeader,
    decode_records,
    iter_batches,
    read_header,
    rebuild_batch,
)

__all__ = ["CompactionPlan", "build", "plan", "swap"]

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 8 << 20
CLEANED_SUFFIX = ".cleaned"


def swap_file_name(log_path: str, end_offset: int) -> str:
    """The copy while it replaces the segments from its own base offset up to ``end_offset`` (see Log._load)."""
    return f"{log_path}.swap-{end_offset}"


@dataclass
class CompactionPlan:
    log: Log
    segments: list[Segment]  # the closed segments to rewrite
    active: Segment
    active_size_bytes: int  # how far to read the active segment for the key map
    now_ms: int
    first_unstable: int | None = None  # the oldest open transaction's first offset (None: none open)
    aborted: dict[int, list[tuple[int, int]]] | None = None  # producer id -> [first offset, abort marker offset)

    def uncommitted(self, header: BatchHeader) -> bool:
        """A transactional write that did not commit (aborted, or still open): it never counts for its keys."""
        if not header.attributes & ATTRIBUTE_TRANSACTIONAL or header.attributes & ATTRIBUTE_CONTROL:
            return False
        if self.first_unstable is not None and header.base_offset >= self.first_unstable:
            return True
        return self.aborted_write(header)

    def aborted_write(self, header: BatchHeader) -> bool:
        return any(first <= header.base_offset < end for first, end in (self.aborted or {}).get(header.producer_id, ()))


@dataclass
class CompactionResult:
    cleaned_paths: dict[int, str]  # first segment's base offset -> cleaned file (of the segments in ``merged``)
    records_before: int
    records_after: int
    merged: dict[int, list[int]]  # first segment's base offset -> base offsets of every segment in the copy


def plan(log_: Log, now_ms: int | None = None) -> CompactionPlan | None:
    """What to compact now, or None when there is no closed segment below the first open transaction."""
    unstable = log_.transactions.first_unstable_offset()
    closed = [s for s in log_.segments[:-1] if unstable is None or s.next_offset <= unstable]
    if not closed:
        return None
    active = log_.active_segment
    aborted: dict[int, list[tuple[int, int]]] = {}
    for txn in log_.aborted_between(log_.log_start_offset, 1 << 62):
        aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
    return CompactionPlan(log_, closed, active, active.size_bytes, int(time.time() * 1000) if now_ms is None else now_ms,
                          first_unstable=unstable, aborted=aborted)


def _batches(segment: Segment, size_bytes: int):
    """Yield raw batches of ``segment`` up to ``size_bytes`` (whole batches only).

    Read through a descriptor of its own: the segment's reads take its lock, and a read of 8 MB held it
    while the disk worked, stopping the event loop's appends to the active segment (which is read too).
    """
    fd = segment.own_descriptor()
    try:
        position = 0
        while position < size_bytes:
            chunk = os.pread(fd, min(_READ_CHUNK_BYTES, size_bytes - position), position)
            consumed = 0
            for start, _base, size in iter_batches(chunk):
                yield chunk[start : start + size]
                consumed = start + size
            if consumed == 0:
                # One batch larger than the chunk: read it whole.
                header = read_header(os.pread(fd, 61, position))
                yield os.pread(fd, header.size, position)
                consumed = header.size
            position += consumed
    finally:
        os.close(fd)


def build(plan_: CompactionPlan) -> CompactionResult:
    """Write cleaned copies of the planned segments (runs in a worker thread)."""
    latest: dict[bytes, int] = {}
    last_batch_of_producer: dict[int, int] = {}  # producer id -> base offset of its last batch
    for segment, size in [(s, s.size_bytes) for s in plan_.segments] + [(plan_.active, plan_.active_size_bytes)]:
        for raw in _batches(segment, size):
            header = read_header(raw)
            if header.attributes & ATTRIBUTE_CONTROL:
                continue  # (a marker's key is no record's, nor is it a batch of the producer's sequence)
            if header.producer_id >= 0:
                last_batch_of_producer[header.producer_id] = header.base_offset
            if plan_.uncommitted(header):
                continue  # an uncommitted write shadows nothing
            for record in decode_records(raw):
                if record.key is not None:
                    latest[record.key] = record.offset
    tombstone_horizon_ms = plan_.now_ms - plan_.log.config.delete_retention_ms
    limit = plan_.log.config.segment_bytes
    cleaned: dict[int, str] = {}
    merged: dict[int, list[int]] = {}
    before = after = 0
    out, first, size = None, None, 0  # the copy being written, the base offset it is named after, its bytes
    for segment in plan_.segments:
        kept_batches = []
        for raw in _batches(segment, segment.size_bytes):
            header = read_header(raw)
            if header.attributes & ATTRIBUTE_CONTROL:
                kept_batches.append(bytes(raw))  # markers stay: how each transaction ended
                continue
            records = decode_records(raw)
            if plan_.aborted_write(header):
                before += len(records)
                if last_batch_of_producer.get(header.producer_id) == header.base_offset:
                    kept_batches.append(rebuild_batch(header, []))
                continue
            kept = [
                r for r in records
                if (r.key is None or latest.get(r.key) == r.offset)
                and not (r.value is None and r.timestamp_ms < tombstone_horizon_ms)
            ]
            before += len(records)
            after += len(kept)
            if len(kept) == len(records):
                kept_batches.append(bytes(raw))
            elif kept or last_batch_of_producer.get(header.producer_id) == header.base_offset:
                # An idempotent producer's last batch stays, if need be as a bare
                # header, so its sequence history survives a rebuild from the log.
                kept_batches.append(rebuild_batch(header, kept))
        cleaned_size = sum(len(b) for b in kept_batches)
        # Index positions are relative offsets in 32 bits: a copy spans less than 2**31 offsets.
        fits = (out is not None and size + cleaned_size <= limit
                and segment.next_offset - first < (1 << 31) - 1)
        if not fits:
            if out is not None:
                _finish(out)
            first, size = segment.base_offset, 0
            path = segment.log_path + CLEANED_SUFFIX
            out = open(path, "wb")
            cleaned[first] = path
            merged[first] = []
        for batch in kept_batches:
            out.write(batch)
        size += cleaned_size
        merged[first].append(segment.base_offset)
    if out is not None:
        _finish(out)
    return CompactionResult(cleaned, before, after, merged)


def _finish(out) -> None:
    out.flush()
    os.fsync(out.fileno())
    out.close()


def swap(plan_: CompactionPlan, result: CompactionResult) -> int:
    """Put the cleaned copies in place (event-loop thread); return how many segments were replaced."""
    log_ = plan_.log
    planned = {segment.base_offset: segment for segment in plan_.segments}
    swapped = 0
    for first, bases in result.merged.items():
        path = result.cleaned_paths.pop(first)
        position = next((i for i, s in enumerate(log_.segments[:-1]) if s.base_offset == first), None)
        group = log_.segments[position:position + len(bases)] if position is not None else []
        if [s.base_offset for s in group] != bases or any(planned.get(s.base_offset) is not s for s in group):
            os.unlink(path)  # the log changed meanwhile (retention): next time
            continue
        swap_path = swap_file_name(group[0].log_path, group[-1].next_offset)
        os.replace(path, swap_path)
        fsync_directory(log_.directory)
        for old in group:
            old.delete()  # its .log and index files; the copy holds what it kept
        os.replace(swap_path, group[0].log_path)
        fsync_directory(log_.directory)
        fresh = Segment(log_.directory, first, log_.config.index_interval_bytes)
        fresh.load(recover=False)
        fresh.write_indexes()
        fresh.seal()
        fresh.track(log_.open_files)
        log_.segments[position:position + len(bases)] = [fresh]
        log_.replaced_segments()
        swapped += len(bases)
    for leftover in result.cleaned_paths.values():  # segments removed meanwhile (retention)
        try:
            os.unlink(leftover)
        except FileNotFoundError:
            pass
    log.info(
        "compacted %s-%d: %d segment(s), %d -> %d records", log_.topic, log_.partition, swapped, result.records_before, result.records_after
    )
    return swapped
