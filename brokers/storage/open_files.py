"""How many segment files a broker keeps open: the least recently used are closed.

A broker with thousands of partitions, most of them idle, and days of
retention holds tens of thousands of segments; without this, each held a file
descriptor for its whole life. A closed file is opened again by the next read,
append or fsync (a rolled segment read-only); an fsync through a new
descriptor flushes the file's dirty pages all the same.

Ownership: the event-loop thread touches and evicts; a compaction thread
reading an old segment touches it too, hence the lock. Closing a file and
using it are serialised by the segment's own lock (``Segment.close_idle``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Protocol

__all__ = ["OpenFiles"]

OPEN_SEGMENTS_MAX = 1_000


class Segment(Protocol):
    """What the LRU needs of a segment (``brokers.storage.segment.Segment``)."""

    def close_idle(self) -> None:
        """Close the file until the next read."""


class OpenFiles:
    def __init__(self, limit: int = OPEN_SEGMENTS_MAX) -> None:
        if limit < 1:
            raise ValueError("at least one segment file must be allowed to stay open")
        self.limit = limit
        self._open: OrderedDict[Segment, None] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()
        self._last: Segment | None = None  # the last one used

    def __len__(self) -> int:
        return len(self._open)

    def used(self, segment: Segment) -> None:
        """``segment``'s file is open and was just read: close the least recently read beyond the limit."""
        if self._last is segment:
            return  # the most recently used already (an active segment, at each append): nothing moves
        with self._lock:
            self._last = segment
            self._open[segment] = None
            self._open.move_to_end(segment)
            victims = [self._open.popitem(last=False)[0] for _ in range(len(self._open) - self.limit)]
        for victim in victims:
            victim.close_idle()

    def forget(self, segment: Segment) -> None:
        with self._lock:
            self._open.pop(segment, None)
            if self._last is segment:
                self._last = None
