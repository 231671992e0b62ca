"""The scrubber: re-reads every segment of every log and checks each batch's CRC.

Bits rot on disks and files get damaged by hand; a batch read only when a
consumer or a follower asks for it could sit damaged for weeks, until the
replica that holds it is the last one left. The scrubber walks all logs in
turn, segment by segment, at a bounded rate (``bytes_per_step`` per call; the
broker calls it every 25 ms), with ``pread`` only, and starts a pass at most
once per ``pass_interval_s`` (the broker's default: an hour): going round again
at once re-read the same bytes for ever (a step every 100 ms, busy or not) and
found nothing new (rot takes time; what arrived since was checked on arrival).
Between passes the broker does not call it (``idle_for``).
A segment read whole and found intact is recorded as verified (so the next
start need not check it);
a bad batch goes to the log's ``on_corruption`` handler, which repairs the
replica from the leader when it can.

Ownership: the broker's event-loop thread. Each step is bounded twice: by
``bytes_per_step`` and by ``step_s`` of time (0.25 ms), the clock read after
every batch. The bytes alone did not bound it: CRC-32C runs at GB/s, but each
batch costs some microseconds of Python, so 800 KiB of one-record batches took
15-25 ms, a stall every 100 ms that set the broker's latency p99.9. Nor did a
clock read per 64 KiB slice: steps of 1 ms took 0.5-1.3 ms (median) and up to
4 ms at 1,000 one-record batches a second, and a request that came meanwhile
waited for them: the p99 (docs/benchmarks.md). Short steps, four times as
often, hold the loop as long in all but keep each wait short. A log of small
batches is therefore scrubbed more slowly than the configured rate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tideway_server.brokers.storage.log import Log
from tideway_server.brokers.storage.segment import Segment

__all__ = ["Scrubber"]

log = logging.getLogger(__name__)

# What a visit to a segment costs against the budget even when it reads
# nothing (an empty segment): a step over many logs stays bounded.
_VISIT_COST_BYTES = 4096
# A step reads at most this much between two looks at the clock.
_SLICE_BYTES = 64 << 10


@dataclass
class _Cursor:
    key: tuple[str, int]
    base_offset: int  # of the segment being read
    position: int = 0
    expected_offset: int = 0
    stamp: tuple[int, int] | None = None  # the segment's (size, mtime) when its scan began


class Scrubber:
    def __init__(self, logs: Callable[[], dict[tuple[str, int], Log]], *, bytes_per_step: int, step_s: float = 0.00025,
                 pass_interval_s: float = 0.0) -> None:
        self._logs = logs
        self.bytes_per_step = bytes_per_step
        self.step_s = step_s
        self.pass_interval_s = pass_interval_s  # 0: each pass right after the one before
        self._pass_started: float | None = None  # time.monotonic() of the current or last pass's start
        self._cursor: _Cursor | None = None
        self.bytes_checked = 0
        self.passes = 0  # complete rounds over every log

    def step(self) -> int:
        """Check about ``bytes_per_step`` bytes; return how many were read (0 between passes)."""
        budget = self.bytes_per_step
        checked = 0
        visited = 0
        stop_at = time.perf_counter() + self.step_s
        while budget > 0 and time.perf_counter() < stop_at:
            if self._cursor is None and self.idle_for() > 0:
                break  # a pass ended: the next starts when its interval is up
            cursor = self._cursor or self._first()
            if cursor is None:
                break  # no logs at all
            segment, log_ = self._segment(cursor)
            if segment is None:
                self._advance(cursor)
                visited += 1
                if visited > 10_000:
                    break  # every log vanished under us this step
                continue
            if cursor.stamp is None:
                cursor.stamp = segment.modification_stamp()
                cursor.expected_offset = segment.base_offset
            end, next_offset, problem = segment.scan(cursor.position, cursor.expected_offset, min(budget, _SLICE_BYTES),
                                                     deadline=stop_at)
            read = max(end - cursor.position, 0)
            checked += read
            budget -= max(read, _VISIT_COST_BYTES)
            cursor.position, cursor.expected_offset = end, next_offset
            if problem:
                log_.on_corruption(log_, next_offset, f"{problem} in {segment.log_path} (found by the scrubber)")
                self._advance(cursor)
            elif end >= segment.size_bytes:
                if segment.modification_stamp() == cursor.stamp:  # nothing written while it was read
                    log_.mark_verified(segment, cursor.stamp)
                self._advance(cursor)
                if segment is log_.active_segment:
                    break  # this log's newest data is checked: give the loop back
        self.bytes_checked += checked
        return checked

    def idle_for(self) -> float:
        """Seconds until the next pass may start; 0 while a pass runs or one may start now."""
        if self._cursor is not None or self._pass_started is None:
            return 0.0
        return max(0.0, self._pass_started + self.pass_interval_s - time.monotonic())

    def _first(self) -> _Cursor | None:
        logs = self._logs()
        if not logs:
            return None
        key = min(logs)
        self._pass_started = time.monotonic()
        self._cursor = _Cursor(key, logs[key].segments[0].base_offset)
        return self._cursor

    def _segment(self, cursor: _Cursor) -> tuple[Segment | None, Log | None]:
        log_ = self._logs().get(cursor.key)
        if log_ is None:
            return None, None
        for segment in log_.segments:
            if segment.base_offset == cursor.base_offset:
                if cursor.position > segment.size_bytes:  # truncated under us: start it again
                    cursor.position, cursor.stamp = 0, None
                return segment, log_
        return None, log_

    def _advance(self, cursor: _Cursor) -> None:
        """Move to the next segment of this log, or to the first segment of the next log."""
        logs = self._logs()
        log_ = logs.get(cursor.key)
        if log_ is not None:
            later = [s.base_offset for s in log_.segments if s.base_offset > cursor.base_offset]
            if later:
                self._cursor = _Cursor(cursor.key, later[0])
                return
        keys = sorted(k for k in logs if k > cursor.key)
        if not keys:
            self.passes += 1
            self._cursor = None
            return
        self._cursor = _Cursor(keys[0], logs[keys[0]].segments[0].base_offset)
