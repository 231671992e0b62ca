"""Live figures as server-sent events: the queue page's throughput chart reads a queue's counters once a second.

One stream per open chart, bounded: a stream ends after ``STREAM_S`` (the browser's EventSource reconnects
at once, and the reconnection checks the member's session and role again), and a member has at most
``STREAMS_PER_MEMBER`` open in this process (more answer 429: a tab left open many times over costs the
brokers nothing extra).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter

from django.http import HttpResponse, StreamingHttpResponse
from tideway_server.gateway.operations.members import QueueInfo
from tideway_server.gateway.operations.traffic import queue_counters

STREAM_S = 60.0
INTERVAL_S = 1.0
STREAMS_PER_MEMBER = 8

_open: Counter[int] = Counter()


class _CounterStream:
    """The events of one open chart; ``close`` (called by Django when the response ends, however it ends)
    gives its place back."""

    def __init__(self, queue: QueueInfo, member: int) -> None:
        self._queue, self._member, self._closed = queue, member, False
        _open[member] += 1

    def __aiter__(self):
        return self._events()

    async def _events(self):
        try:
            yield "retry: 1000\n\n"  # reconnect after a second when a stream ends
            ends = time.monotonic() + STREAM_S
            while time.monotonic() < ends:
                figures = await queue_counters(self._queue)  # {"error": ...} when the brokers did not answer
                yield f"data: {json.dumps(figures)}\n\n"
                await asyncio.sleep(INTERVAL_S)
        finally:
            self.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            _open[self._member] -= 1
            if _open[self._member] <= 0:
                del _open[self._member]


def counter_events(queue: QueueInfo, member: int):
    if _open[member] >= STREAMS_PER_MEMBER:
        return HttpResponse(f"at most {STREAMS_PER_MEMBER} live charts per member: close some tabs", status=429,
                            content_type="text/plain")
    response = StreamingHttpResponse(_CounterStream(queue, member), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # proxies must pass each event on at once
    return response
