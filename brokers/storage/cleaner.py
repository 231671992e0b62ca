"""Log compaction: keep the latest record of every key (cleanup.policy=compact).

The cleaner works on closed segments only (never the active one), in three
steps so that produce and fetch never wait for it:

1. ``plan`` (event-loop thread): note the closed segments and how far the
   active segment reaches right now.
2. ``build`` (a worker thread): read everything once to find each key's
   latest offset, then write a cleaned copy of every closed segment next to it
   (``.log.cleaned``): batches whose records all survive are copied byte for
   byte, others are rebuilt with the survivors at their original offsets, empty
   ones are dropped. Tombstones (null values) older than delete.retention.ms
   go too. The originals are only read (pread), so readers are unaffected.
3. ``swap`` (event-loop thread): replace each segment that is still part of
   the log with its cleaned copy, atomically by rename. A reader sees the old
   segment or the new one, and both hold the latest value of every key.

Offsets never change; compaction leaves gaps, which readers skip.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass

from brokers.record.batch import decode_records, iter_batches, read_header, rebuild_batch
from brokers.storage.log import Log
from brokers.storage.segment import Segment

__all__ = ["CompactionPlan", "build", "plan", "swap"]

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 8 << 20
CLEANED_SUFFIX = ".cleaned"


@dataclass
class CompactionPlan:
    log: Log
    segments: list[Segment]  # the closed segments to rewrite
    active: Segment
    active_size_bytes: int  # how far to read the active segment for the key map
    now_ms: int


@dataclass
class CompactionResult:
    cleaned_paths: dict[int, str]  # segment base offset -> cleaned file
    records_before: int
    records_after: int


def plan(log_: Log, now_ms: int | None = None) -> CompactionPlan | None:
    """What to compact now, or None when there is no closed segment."""
    closed = log_.segments[:-1]
    if not closed:
        return None
    active = log_.active_segment
    return CompactionPlan(log_, list(closed), active, active.size_bytes, int(time.time() * 1000) if now_ms is None else now_ms)


def _batches(segment: Segment, size_bytes: int):
    """Yield raw batches of ``segment`` up to ``size_bytes`` (whole batches only)."""
    position = 0
    while position < size_bytes:
        chunk = segment.read_batch(position, min(_READ_CHUNK_BYTES, size_bytes - position))
        consumed = 0
        for start, _base, size in iter_batches(chunk):
            yield chunk[start : start + size]
            consumed = start + size
        if consumed == 0:
            # One batch larger than the chunk: read it whole.
            header = read_header(segment.read_batch(position, 61))
            yield segment.read_batch(position, header.size)
            consumed = header.size
        position += consumed


def build(plan_: CompactionPlan) -> CompactionResult:
    """Write cleaned copies of the planned segments (runs in a worker thread)."""
    latest: dict[bytes, int] = {}
    last_batch_of_producer: dict[int, int] = {}  # producer id -> base offset of its last batch
    for segment, size in [(s, s.size_bytes) for s in plan_.segments] + [(plan_.active, plan_.active_size_bytes)]:
        for raw in _batches(segment, size):
            header = read_header(raw)
            if header.producer_id >= 0:
                last_batch_of_producer[header.producer_id] = header.base_offset
            for record in decode_records(raw):
                if record.key is not None:
                    latest[record.key] = record.offset
    tombstone_horizon_ms = plan_.now_ms - plan_.log.config.delete_retention_ms
    cleaned: dict[int, str] = {}
    before = after = 0
    for segment in plan_.segments:
        path = segment.log_path + CLEANED_SUFFIX
        with open(path, "wb") as out:
            for raw in _batches(segment, segment.size_bytes):
                records = decode_records(raw)
                kept = [
                    r for r in records
                    if (r.key is None or latest.get(r.key) == r.offset)
                    and not (r.value is None and r.timestamp_ms < tombstone_horizon_ms)
                ]
                before += len(records)
                after += len(kept)
                header = read_header(raw)
                if len(kept) == len(records):
                    out.write(raw)
                elif kept or last_batch_of_producer.get(header.producer_id) == header.base_offset:
                    # An idempotent producer's last batch stays, if need be as a bare
                    # header, so its sequence history survives a rebuild from the log.
                    out.write(rebuild_batch(header, kept))
            out.flush()
            os.fsync(out.fileno())
        cleaned[segment.base_offset] = path
    return CompactionResult(cleaned, before, after)


def swap(plan_: CompactionPlan, result: CompactionResult) -> int:
    """Put the cleaned segments in place (event-loop thread); return how many."""
    log_ = plan_.log
    swapped = 0
    for index, segment in enumerate(log_.segments[:-1]):
        path = result.cleaned_paths.pop(segment.base_offset, None)
        if path is None or segment not in plan_.segments:
            continue
        segment.delete_indexes()
        os.replace(path, segment.log_path)
        fresh = Segment(log_.directory, segment.base_offset, log_.config.index_interval_bytes)
        fresh.load(recover=False)
        fresh.write_indexes()
        if log_.open_files is not None:
            fresh.seal(log_.open_files)
        segment.close_without_indexes()
        log_.segments[index] = fresh
        swapped += 1
    for leftover in result.cleaned_paths.values():  # segments removed meanwhile (retention)
        try:
            os.unlink(leftover)
        except FileNotFoundError:
            pass
    log.info(
        "compacted %s-%d: %d segment(s), %d -> %d records", log_.topic, log_.partition, swapped, result.records_before, result.records_after
    )
    return swapped
