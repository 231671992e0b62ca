"""fsyncs shared between producers (issue 15: a `flush: always` broker locked up).

The regression: a producer that asked for the fsync in flight just as it
finished got that finished fsync back, awaited it without yielding, and spun
forever, so the callback that would forget it never ran.
"""

from __future__ import annotations

import asyncio

from brokers.server.replica_manager import ReplicaManager


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
