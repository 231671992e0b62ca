"""What one broker carried: messages and bytes in and out per topic, and per tenant minute by minute.

"In" is what leaders appended for producers; "out" is what was served to
consumers (fetches) and delivered to queue receivers. Replication is neither,
and neither is a broker reading a remote partition for a queue group it
coordinates (the delivery counts, once, where it happens).

Counters start at zero when the broker starts (``started_ms`` tells readers
when), so a reader computing rates across brokers must treat a counter that
went down as a restart. Per scope (a tenant's topic prefix, ``t2.``) the
broker keeps the last hour minute by minute: a snapshot of the scope's totals
at each minute boundary, the history being the differences. Internal topics
(``__consumer_offsets``) count per topic but belong to no scope.

The hot path is one dict lookup and a few additions per partition; the
Prometheus counters read these totals at scrape time.
"""

from __future__ import annotations

import collections
import time

__all__ = ["HISTORY_MINUTES", "Traffic", "scope_of"]

HISTORY_MINUTES = 60


def scope_of(topic: str) -> str | None:
    """The scope a topic's traffic adds to: its tenant prefix (``t2.`` of ``t2.orders``), or None."""
    if topic.startswith("__"):
        return None
    dot = topic.find(".")
    return topic[: dot + 1] if dot > 0 else None


class Traffic:
    def __init__(self, clock=time.time) -> None:
        self._clock = clock
        self.started_ms = int(clock() * 1000)
        # topic -> (its counts, its scope's counts or None); counts are [messages in, bytes in, messages out, bytes out]
        self._topics: dict[str, tuple[list[int], list[int] | None]] = {}
        self._scopes: dict[str, list[int]] = {}
        # Per scope: (minute, totals at that minute's start), oldest first, at most HISTORY_MINUTES + 1.
        self._snapshots: dict[str, collections.deque[tuple[int, tuple[int, ...]]]] = {}
        self._minute = int(clock()) // 60
        self.requests: dict[str, int] = {}  # scope -> requests its tenant keys made of this broker, since start

    # -- counting (hot path) ---------------------------------------------------------------

    def _entry(self, topic: str) -> tuple[list[int], list[int] | None]:
        entry = self._topics.get(topic)
        if entry is None:
            scope = scope_of(topic)
            scope_counts = None
            if scope is not None:
                scope_counts = self._scopes.get(scope)
                if scope_counts is None:
                    scope_counts = self._scopes[scope] = [0, 0, 0, 0]
                    self._snapshots[scope] = collections.deque([(self._minute, (0, 0, 0, 0))], maxlen=HISTORY_MINUTES + 1)
            entry = self._topics[topic] = ([0, 0, 0, 0], scope_counts)
        return entry

    def add_in(self, topic: str, messages: int, size: int) -> None:
        counts, scope = self._entry(topic)
        counts[0] += messages
        counts[1] += size
        if scope is not None:
            scope[0] += messages
            scope[1] += size

    def add_out(self, topic: str, messages: int, size: int) -> None:
        counts, scope = self._entry(topic)
        counts[2] += messages
        counts[3] += size
        if scope is not None:
            scope[2] += messages
            scope[3] += size

    def add_request(self, scope: str) -> None:
        self.requests[scope] = self.requests.get(scope, 0) + 1

    def forget(self, topic: str) -> None:
        """A deleted topic's own counters go; what it carried stays in its scope's history."""
        self._topics.pop(topic, None)

    # -- minutes --------------------------------------------------------------------------

    def roll(self) -> None:
        """Snapshot every scope's totals when a minute has begun (called often; cheap otherwise)."""
        minute = int(self._clock()) // 60
        if minute == self._minute:
            return
        self._minute = minute
        for scope, counts in self._scopes.items():
            snapshots = self._snapshots[scope]
            totals = tuple(counts)
            if totals == snapshots[-1][1]:
                snapshots[-1] = (minute, totals)  # a quiet minute: the baseline moves on
            else:
                snapshots.append((minute, totals))  # the minute just ended carried what changed

    # -- reading --------------------------------------------------------------------------

    def totals(self, topic: str) -> tuple[int, int, int, int]:
        entry = self._topics.get(topic)
        return tuple(entry[0]) if entry is not None else (0, 0, 0, 0)  # type: ignore[return-value]

    def topics(self) -> list[tuple[str, tuple[int, int, int, int]]]:
        return [(topic, tuple(counts)) for topic, (counts, _scope) in list(self._topics.items())]  # type: ignore[misc]

    def history(self, scope: str) -> list[tuple[int, int, int, int, int]]:
        """(minute start in unix seconds, messages in, bytes in, messages out, bytes out) for each minute of the last
        hour in which the scope carried anything, oldest first; the current minute so far is the last."""
        self.roll()
        snapshots = self._snapshots.get(scope)
        if snapshots is None:
            return []
        current = (self._minute, tuple(self._scopes[scope]))
        points = [*snapshots, current]
        oldest = self._minute - HISTORY_MINUTES + 1
        out = []
        for (minute, before), (_next_minute, after) in zip(points, points[1:], strict=False):
            # What changed between two snapshots happened in the earlier one's minute: a quiet minute moves
            # the last snapshot forward instead of adding one (roll runs at least once a minute).
            if minute < oldest or before == after:
                continue
            out.append((minute * 60, after[0] - before[0], after[1] - before[1], after[2] - before[2], after[3] - before[3]))
        return out
