"""How many rolled segments' files a broker keeps open: the least recently read are closed.

A rolled ("sealed") segment is never written again and was fsynced when it
rolled, so its file can be closed at any time and opened again, read-only,
by the next read. A broker with thousands of partitions and days of
retention holds tens of thousands of segments; without this, each held a
file descriptor for its whole life. Active segments (one per partition) stay
open: they are written to, fsynced by the flusher thread, and mostly read.

Ownership: the event-loop thread touches and evicts; a compaction thread
reading an old segment touches it too, hence the lock. Closing a file and
reading it are serialised by the segment's own lock (``Segment.close_idle``).
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
            raise ValueError("at least one sealed segment must be allowed to stay open")
        self.limit = limit
        self._open: OrderedDict[Segment, None] = OrderedDict()  # least recently used first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._open)

    def used(self, segment: Segment) -> None:
        """``segment``'s file is open and was just read: close the least recently read beyond the limit."""
        with self._lock:
            self._open[segment] = None
            self._open.move_to_end(segment)
            victims = [self._open.popitem(last=False)[0] for _ in range(len(self._open) - self.limit)]
        for victim in victims:
            victim.close_idle()

    def forget(self, segment: Segment) -> None:
        with self._lock:
            self._open.pop(segment, None)
