"""fsyncs shared between producers (issue 15: a `flush: always` broker locked up).

The regression: a producer that asked for the fsync in flight just as it
finished got that finished fsync back, awaited it without yielding, and spun
forever, so the callback that would forget it never ran.
"""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

from tideway_server.brokers.server.replica_manager import FLUSH_IDLE_CHECK_S, ReplicaManager


class FakeLog:
    """A log whose fsync makes everything appended durable."""

    def __init__(self) -> None:
        self.log_end_offset = 0
        self.flushed_offset = 0
        self.fsyncs = 0

    def flush(self) -> int:
        self.fsyncs += 1
        self.flushed_offset = self.log_end_offset
        return self.flushed_offset


def _manager() -> ReplicaManager:
    return ReplicaManager(1, logs=None, metadata=None, metrics=None, on_data=lambda topic: None)


def test_a_finished_fsync_is_never_handed_out_again():
    async def run() -> int:
        manager, log = _manager(), FakeLog()
        log.log_end_offset = 5
        finished = asyncio.get_running_loop().create_future()
        finished.set_result(0)  # an fsync that finished before our records were appended; not yet forgotten
        manager._flushes[log] = finished
        await asyncio.wait_for(manager._until_durable(log, 4), 5)
        return log.fsyncs

    assert asyncio.run(run()) == 1


def test_producers_appending_during_an_fsync_share_the_next_one():
    async def run() -> tuple[int, int]:
        manager, log = _manager(), FakeLog()
        log.log_end_offset = 10
        first = asyncio.ensure_future(manager._until_durable(log, 9))
        await asyncio.sleep(0)  # its fsync is in flight
        log.log_end_offset = 30  # three more producers append meanwhile
        others = [asyncio.ensure_future(manager._until_durable(log, offset)) for offset in (14, 19, 29)]
        await asyncio.wait_for(asyncio.gather(first, *others), 5)
        return log.fsyncs, log.flushed_offset

    fsyncs, flushed = asyncio.run(run())
    assert flushed == 30
    assert fsyncs <= 2  # one for the first producer, one shared by the three that came during it


class IntervalLog(FakeLog):
    """A log of a topic with ``flush: interval_ms`` (-1: none, 0: always), last fsynced at ``last_flush``."""

    def __init__(self, interval_ms: int, last_flush: float) -> None:
        super().__init__()
        self.config = SimpleNamespace(flush_interval_ms=interval_ms)
        self.last_flush_monotonic = last_flush

    def flush(self) -> int:
        self.last_flush_monotonic = time.monotonic()
        return super().flush()


def test_the_interval_fsync_check_says_when_it_is_next_due():
    """The broker runs it every 50 ms at most; with no topic flushing on an interval it need not run for a second."""
    never, always = IntervalLog(-1, 0.0), IntervalLog(0, 0.0)  # flush: none; flush: always (the produce fsyncs)
    for log in (never, always):
        log.log_end_offset = 5  # unflushed records, but not for this check

    async def run() -> tuple[float, float, int]:
        manager = _manager()
        manager.logs = SimpleNamespace(logs={("none", 0): never, ("always", 0): always})
        idle = await manager.flush_due()
        due = IntervalLog(100, time.monotonic() - 1)
        due.log_end_offset = 5
        manager.logs.logs[("interval", 0)] = due
        busy = await manager.flush_due()
        return idle, busy, due.fsyncs

    idle, busy, fsyncs = asyncio.run(run())
    assert idle == FLUSH_IDLE_CHECK_S
    assert fsyncs == 1 and 0 < busy <= 0.1  # fsynced now; due again one interval later
    assert never.fsyncs == always.fsyncs == 0
