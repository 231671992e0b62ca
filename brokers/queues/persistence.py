"""Writing share-partitions' state to the coordinator's internal partition before answering.

Every acknowledgement (accept, release, reject, extend) is written and replicated before it is answered, as
the changes since the write before (``state_log``), so a write costs what changed, not the whole window;
whoever changed the state while a write was in flight is carried by the next one. Acquisitions are written
too, but receivers get their records without waiting for that write (``write_soon``).

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging

from tideway_server.brokers.queues.held import Coordinator, HeldShares, ShareState

from tideway.aio import cancel_and_wait
from tideway.protocol import errors

log = logging.getLogger(__name__)

STOP_WRITE_WAIT_S = 2.0  # how long a stopping broker waits for acquisitions' writes in flight
# How long acquisitions wait to be written: an acknowledgement that comes meanwhile carries them,
# and records accepted below the start need no row at all (a worker acking within a few ms of
# receiving, the common case, then costs one state write instead of two). Longer than the gateway's
# ack linger (10 ms) and a round trip: at 5 ms, the acquisitions of WebSocket subscribers' messages
# were written on their own, a third of the coordinator's state writes at 1,000 msgs/s.
ACQUISITION_WRITE_DELAY_S = 0.05


class StateWriter:
    def __init__(self, held: HeldShares, coordinator: Coordinator) -> None:
        self.held = held
        self.coordinator = coordinator
        self._acquisition_writes: set[asyncio.Task] = set()  # see write_soon

    async def stop(self) -> None:
        if self._acquisition_writes:  # a clean shutdown keeps what receivers were told, if it can within a moment
            await asyncio.wait(self._acquisition_writes, timeout=STOP_WRITE_WAIT_S)
        await cancel_and_wait(*self._acquisition_writes)

    async def persist(self, index: int, state: ShareState) -> None:
        """Return once the state as of now is replicated (a write of a later state counts).

        Writes of one share-partition do not wait for each other: each carries
        the changes since the one before, they are appended in that order, and
        a write is replicated only once every earlier one is.
        """
        while True:
            wanted = state.version
            if wanted <= state.persisted:
                return
            if wanted <= state.taken:  # a write in flight carries it
                done = next((done for version, done in state.writes if version >= wanted), None)
                if done is None:  # it failed meanwhile: write again
                    state.taken = state.persisted
                    continue
                try:
                    await asyncio.shield(done)
                except (errors.TidewayError, asyncio.CancelledError):
                    if not self.held.holds(state):
                        raise errors.NotCoordinatorError("this broker no longer coordinates the group") from None
                continue
            version = state.taken = state.version
            records, undo = state.state_log.next_write(state.share)
            done = asyncio.get_running_loop().create_future()
            state.writes.append((version, done))
            try:
                await self.coordinator.write(index, records)
            except BaseException as exc:
                state.state_log.failed(state.share, undo)
                state.taken = state.persisted  # the next caller writes again
                if not done.done():
                    done.set_exception(exc)
                    done.exception()
                raise
            else:
                state.persisted = max(state.persisted, version)
                if not done.done():
                    done.set_result(None)
            finally:
                state.writes.remove((version, done))

    def write_soon(self, index: int, state: ShareState) -> None:
        """Write acquisitions soon (ACQUISITION_WRITE_DELAY_S) without making their receiver wait for the write.

        An acquisition is not an acknowledgement: if this broker fails before the
        write is replicated, the records are simply available again at the next
        coordinator, with the delivery count of the last write (the choice of
        Kafka's share groups, which do not write acquisitions at all). Waiting
        for it doubled the publish-to-push latency (two replicated writes in
        series). Acks, nacks and extensions still answer only once written, and
        their write carries any acquisition before them.
        """
        if state.acquisitions_to_write:
            return  # the write due carries these too
        state.acquisitions_to_write = True
        task = asyncio.get_running_loop().create_task(self._write_acquisitions(index, state))
        self._acquisition_writes.add(task)
        task.add_done_callback(self._acquisition_writes.discard)

    async def _write_acquisitions(self, index: int, state: ShareState) -> None:
        try:
            await asyncio.sleep(ACQUISITION_WRITE_DELAY_S)
            state.acquisitions_to_write = False
            await self.persist(index, state)  # nothing to do when an acknowledgement's write carried them
        except errors.TidewayError as exc:  # handed back to the state log: the next write carries them
            log.info("%s/%s-%d: acquisitions not written yet: %s", state.group_id, state.topic, state.partition, exc)
