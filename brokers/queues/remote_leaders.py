"""Following remote leaders for waiting receivers: one long-polling, streaming fetch per share-partition whose
partition another broker leads, so that records committed there reach the window (and wake the receivers) at
once, without receivers asking the leader themselves.

Partitions this broker leads wake receivers through ``HeldShares.on_data`` instead. When the controller moves a
partition's leadership, watches on the old leader are dropped (a frozen one would hold the partition's reads
for a whole wait) and the receivers read from the new one (issue 40).

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time

from tideway_server.brokers.queues.held import HeldShares, ShareState
from tideway_server.brokers.queues.window import READ_BYTES, WINDOW_RECORDS_MAX, WindowReader
from tideway_server.brokers.storage import TopicConfig

from tideway.aio import Signal, cancel_and_wait
from tideway.native.client import TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m

log = logging.getLogger(__name__)

WATCH_WAIT_MS = 5_000  # how long one long-polling fetch from a remote leader waits for new records
WATCH_KEEP_S = 1.0  # a watch that brought records asks again if the share-partition was used this recently
WATCH_ANSWERS_MAX = 1_000  # answers of one watch's fetch (it streams: see _follow)


class RemoteLeaderWatch:
    def __init__(self, held: HeldShares, reader: WindowReader) -> None:
        self.held = held
        self.reader = reader
        self._following: set[asyncio.Task] = set()  # see on_partition_states

    async def stop(self) -> None:
        await cancel_and_wait(*self._following, *(s.watching for s in self.held.loaded.values() if s.watching is not None))

    def watch(self, group_id: str, topic: str, config: TopicConfig) -> None:
        """Receivers are waiting: long-poll the remote leaders, so that new records wake them at once.

        For each partition another broker leads, one fetch per share-partition waits at the leader until
        it has committed records past the window, which go into the window.
        """
        for partition in range(config.partitions):
            state = self.held.loaded.get((group_id, topic, partition))
            if state is None or state.watching is not None or state.share.window_records >= WINDOW_RECORDS_MAX:
                continue
            if self.reader.local_leader(topic, partition) is None:
                state.watching = asyncio.get_running_loop().create_task(self._watch(state, config))

    def may_have_more(self, state: ShareState) -> bool:
        """Whether a read could bring records now."""
        local = self.reader.local_leader(state.topic, state.partition)
        if local is not None:
            return state.share.end_offset < local.log.last_stable_offset
        # A remote leader: ask it, unless a long poll is out there already (what it brings goes
        # into the window and wakes the receivers). Asking on every pass made each waiting
        # receiver a fetch every pass.
        return state.watching is None

    def on_partition_states(self, states: list[m.PartitionState]) -> None:
        """The controller's new partition states: drop watches on leaders that lost their partition.

        A watch waits at its leader up to WATCH_WAIT_MS (plus the read slack); on a frozen leader
        that held every read of the partition for the whole wait, since receivers leave a watched
        partition to its watch. The watches go now, the cluster client learns the new leaders, and
        the receivers are woken to read from them.
        """
        client = self.reader.client
        if client is None or not self.held.loaded:
            return
        moved = set()
        for state in states:
            try:
                if state.topic in client.topics and client.leader_for(state.topic, state.partition) != state.leader:
                    moved.add((state.topic, state.partition))
            except errors.TidewayError:
                moved.add((state.topic, state.partition))
        if not moved:
            return
        woken = set()
        for share in self.held.loaded.values():
            if (share.topic, share.partition) in moved:
                if share.watching is not None:
                    share.watching.cancel()
                    share.watching = None
                woken.add((share.group_id, share.topic))
        if woken:
            task = asyncio.get_running_loop().create_task(self._follow_new_leaders(client, woken))
            self._following.add(task)
            task.add_done_callback(self._following.discard)

    async def _follow_new_leaders(self, client: TidewayClient, woken: set[tuple[str, str]]) -> None:
        try:
            await client.refresh_metadata(sorted({topic for _group, topic in woken}))
        except errors.TidewayError as exc:
            log.debug("metadata after a leader change: %s", exc)
        for group_id, topic in woken:
            self.held.wake(group_id, topic)

    async def _watch(self, state: ShareState, config: TopicConfig) -> None:
        """Follow a remote leader past the window; go on while records come and receivers are active.

        Following again at once after a fetch that brought records (rather than when a receiver next
        waits) keeps a fetch out while traffic flows: the receivers woken by these records then
        find it out there and do not ask the leader themselves (an immediate fetch that was empty
        half the time: about one request per message at 1,000 msgs/s through the gateway).
        """
        try:
            client = await self.reader.cluster_client()
            while (await self._follow(client, state, config) and self.held.holds(state)
                   and time.monotonic() - state.used <= WATCH_KEEP_S and state.share.window_records < WINDOW_RECORDS_MAX):
                pass
        except (errors.TidewayError, OSError) as exc:
            log.debug("watching %s-%d for group %s: %s", state.topic, state.partition, state.group_id, exc)
            await asyncio.sleep(0.1)
        finally:
            if state.watching is asyncio.current_task():  # not a newer watch (see on_partition_states)
                state.watching = None
        self.held.wake(state.group_id, state.topic)

    async def _follow(self, client: TidewayClient, state: ShareState, config: TopicConfig) -> bool:
        """One fetch from the window's end that streams: each answer goes into the window as it comes.

        The fetch stays open at the leader for up to WATCH_WAIT_MS and answers each time records
        are committed there, so a message costs the leader an answer but no request (a fetch per
        answer was 0.67 requests a message at 1,000 msgs/s through the gateway, with 3 partitions
        on 3 brokers). Returns whether it brought records. If the window moved meanwhile, the
        share-partition went or the window is full, the rest of the stream is left to run out
        (the connection drops what it still sends).
        """
        answers: list[m.FetchPartitionResult] = []
        arrived = Signal()

        def on_answer(result: m.FetchPartitionResult) -> None:
            answers.append(result)
            arrived.set()

        offset = state.share.end_offset
        fetching = asyncio.get_running_loop().create_task(client.fetch(
            state.topic, state.partition, offset, max_bytes=READ_BYTES, wait_ms=WATCH_WAIT_MS, retry_for_s=0,
            replica_id=m.QUEUE_READER, answers_max=WATCH_ANSWERS_MAX, on_answer=on_answer))
        fetching.add_done_callback(lambda _done: arrived.set())
        brought = False
        try:
            while answers or not fetching.done():
                await arrived.wait()
                arrived.clear()
                taken = answers[:]
                answers.clear()
                async with state.reading:
                    for result in taken:
                        if (state.share.end_offset != offset or not self.held.holds(state)
                                or state.share.window_records >= WINDOW_RECORDS_MAX):
                            return brought
                        self.reader.add(state, config, result.records, offset, result.last_stable_offset,
                                        result.aborted_transactions)
                        offset = state.share.end_offset
                        brought = brought or bool(result.records)
                if brought:
                    self.held.wake(state.group_id, state.topic)  # this task is still the watch: the woken do not fetch
            fetching.result()  # its error, if it failed
        finally:
            fetching.cancel()
        return brought
