"""The queue service: queue groups' receives and acknowledgements, on the group's coordinator.

For each (group, topic, partition) the coordinator holds a ``SharePartition`` (the state machine) and the
payloads of the records in its window. The service answers receives (``acquire``: lock records, waiting for
them up to the receive's wait) and acknowledgements (accept, release, reject, extend), and runs lock expiry.
The rest is in rooms of its own:

* ``held``: the share-partitions held here (loaded, or only restored from their state log) and their waiters;
* ``window``: reading records into a window, from the local log or the partition's leader;
* ``remote_leaders``: long polls on other brokers' partitions while receivers wait;
* ``persistence``: writing state changes to the coordinator's internal partition before answering;
* ``dead_letters``: writing records past their delivery limit to the dead-letter topic.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tideway_server.brokers.queues.dead_letters import DeadLetterWriter
from tideway_server.brokers.queues.held import (
    Coordinator,
    HeldShares,
    ShareState,
    now_ms,
    settings_of,
)
from tideway_server.brokers.queues.persistence import StateWriter
from tideway_server.brokers.queues.remote_leaders import RemoteLeaderWatch
from tideway_server.brokers.queues.share_partition import QueueSettings
from tideway_server.brokers.queues.window import WindowReader
from tideway_server.brokers.storage import TopicConfig

from tideway.aio import cancel_and_wait
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.headers import DEADLINE_HEADER

if TYPE_CHECKING:
    from tideway.native.client import TidewayClient

__all__ = ["DEADLINE_HEADER", "QueueService"]

MAX_WAIT_MS = 30_000
IDLE_RECHECK_S = 1.0  # a waiting receive looks again at least this often though nothing woke it
IDLE_UNLOAD_S = 300.0  # a share-partition nobody received from or acknowledged on for this long is unloaded
UNLOAD_CHECK_S = 10.0  # how often idle share-partitions are looked for
EXPIRE_CHECK_S = 0.1  # how often locks are looked at for expiry
ACTIONS = ("accept", "release", "reject", "extend")
# Offsets one acknowledgement request may accept through ranges: a few bytes name a long range, and each
# offset costs a step of the loop (a window holds at most WINDOW_RECORDS_MAX records per partition).
ACCEPTED_PER_REQUEST_MAX = 100_000


def _check_accept_ranges(ranges: list[m.AcceptRange]) -> None:
    """Refuse the whole request, before anything changes, if a range is malformed or they are too long together."""
    total = 0
    for accepts in ranges:
        if accepts.partition < 0 or accepts.first_offset < 0 or accepts.last_offset < accepts.first_offset:
            raise errors.InvalidRequestError(
                f"accept range {accepts.partition}:{accepts.first_offset}-{accepts.last_offset} is not a partition "
                "and two offsets in order")
        total += accepts.last_offset - accepts.first_offset + 1
    if total > ACCEPTED_PER_REQUEST_MAX:
        raise errors.InvalidRequestError(f"{total} offsets accepted in one request; at most {ACCEPTED_PER_REQUEST_MAX:,}")


def _delivered_bytes(records: list[m.AcquiredRecord]) -> int:
    """Deliveries' size as metered: keys, values and headers (names and values)."""
    size = 0
    for record in records:
        key, value, headers = record.key, record.value, record.headers
        size += (len(key) if key else 0) + (len(value) if value else 0)
        if headers:
            size += sum(len(name) + len(header or b"") for name, header in headers)
    return size


class _Acknowledged:
    """What one acknowledgement request changed: for its write, its wake-ups and its dead letters."""

    def __init__(self) -> None:
        self.touched: dict[int, ShareState] = {}
        self.released = False  # records available again: receivers may take them
        self.dead = False  # records to dead-letter
        self.held_back: set[int] = set()  # partitions whose receivers wait on the in-flight cap or a FIFO key

    def changed(self, state: ShareState) -> None:
        state.version += 1
        self.touched[id(state)] = state

    def note_slot_freed(self, state: ShareState, partition: int) -> None:
        """An accept or reject lets receivers waiting on the in-flight cap or a busy FIFO key go on."""
        share = state.share
        if share.in_flight >= share.settings.max_in_flight or share.settings.fifo:
            self.held_back.add(partition)


class QueueService:
    def __init__(self, coordinator: Coordinator, peer_client: Callable[[], TidewayClient],
                 on_delivered: Callable[[str, int, int], None] = lambda topic, messages, size: None,
                 idle_unload_s: float = IDLE_UNLOAD_S) -> None:
        self.coordinator = coordinator
        self.idle_unload_s = idle_unload_s
        self._on_delivered = on_delivered  # (topic, messages, bytes) delivered to receivers: the broker's traffic
        self.held = HeldShares()
        self.reader = WindowReader(coordinator, peer_client)
        self.remote_leaders = RemoteLeaderWatch(self.held, self.reader)
        self.writer = StateWriter(self.held, coordinator)
        self.dead_letters = DeadLetterWriter(self.held, coordinator, self.reader, self.writer)
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._expire_forever()), loop.create_task(self.dead_letters.run_forever()),
                       loop.create_task(self._unload_idle_forever())]

    async def stop(self) -> None:
        await self.writer.stop()
        await cancel_and_wait(*self._tasks)
        await self.remote_leaders.stop()
        await self.dead_letters.stop()
        await self.reader.close()

    # -- what the coordinator tells it, and asks of it ----------------------------------------------------

    def restore(self, group_id: str, topic: str, partition: int, snapshot: dict, seq: int) -> None:
        """A share-partition's state as its log says (``state_log.replay``), up to write ``seq``."""
        self.held.restore(group_id, topic, partition, snapshot, seq)
        self.dead_letters.due()

    def forget_topic(self, topic: str) -> list[tuple[str, int, int]]:
        return self.held.forget_topic(topic)

    def unload_group(self, group_id: str) -> None:
        self.held.unload_group(group_id)

    def on_data(self, topic: str) -> None:
        self.held.on_data(topic)

    def on_partition_states(self, states: list[m.PartitionState]) -> None:
        self.remote_leaders.on_partition_states(states)

    def held_counts(self) -> tuple[int, int, int]:
        return self.held.held()

    def positions(self) -> dict[str, list[tuple[str, int, int, int]]]:
        return self.held.positions()

    def describe(self, group_id: str) -> list[m.SharePartitionDescription]:
        return self.held.describe(group_id)

    async def _load(self, group_id: str, topic: str, partition: int, settings: QueueSettings) -> ShareState:
        return await self.held.load(group_id, topic, partition, settings, self.reader.log_start)

    # -- acquire -----------------------------------------------------------------------------------

    async def acquire(self, request: m.ShareAcquireRequest) -> m.ShareAcquireResponse:
        coordinator = self.coordinator
        index = coordinator.check_coordinator(request.group_id)
        if request.max_records < 1:
            raise errors.InvalidRequestError("max_records must be at least 1")
        config = coordinator.topic_config(request.topic)
        await coordinator.set_type(index, request.group_id, "queue")
        settings = settings_of(config)
        lock_ms = request.lock_ms if request.lock_ms > 0 else None
        deadline = time.monotonic() + min(max(request.max_wait_ms, 0), MAX_WAIT_MS) / 1000
        event = self.held.signal(request.group_id, request.topic)
        while True:
            event.clear()
            got, touched, next_due = await self._acquire_once(request, config, settings, lock_ms)
            if touched:
                for state in touched:
                    self.writer.write_soon(index, state)
                if got:
                    self._on_delivered(request.topic, len(got), _delivered_bytes(got))
                return m.ShareAcquireResponse(records=got)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return m.ShareAcquireResponse()
            self.remote_leaders.watch(request.group_id, request.topic, config)
            # Woken by what makes records available (local appends, a remote leader's long poll,
            # acknowledgements, releases) or by the next lock expiry or delay; the recheck is a
            # safety net, not a poll: waiting receivers cost nothing while nothing happens.
            wait = min(remaining, IDLE_RECHECK_S)
            if next_due is not None:
                wait = min(wait, max(0.001, (next_due - now_ms()) / 1000))
            await event.wait(wait)
            coordinator.check_coordinator(request.group_id)

    async def _acquire_once(self, request, config: TopicConfig, settings: QueueSettings, lock_ms):
        """One round over the partitions, from the next in turn: (records, share-partitions changed, when the next
        lock expires or delayed record becomes available if nothing was got)."""
        count = config.partitions
        start = self.held.next_start(request.group_id, request.topic)
        got: list[m.AcquiredRecord] = []
        touched: list[ShareState] = []
        for i in range(count):
            want = request.max_records - len(got)
            if want <= 0:
                break
            partition = (start + i) % count
            state = await self._load(request.group_id, request.topic, partition, settings)
            acquired = await self._lock_records(state, config, want, lock_ms)
            records = state.records
            make = m.AcquiredRecord
            for lock in acquired:
                record = records[lock.offset]
                # The record's headers tuple as it is: msgspec encodes it as the list it is declared as.
                got.append(make(partition=partition, offset=lock.offset, delivery_count=lock.delivery_count,
                                lock_deadline_ms=lock.lock_deadline_ms, timestamp_ms=record.timestamp_ms,
                                key=record.key, value=record.value, headers=record.headers))
            if acquired:
                state.version += 1
                touched.append(state)
        next_due = None if got else self._next_due(request.group_id, request.topic, count)
        return got, touched, next_due

    async def _lock_records(self, state: ShareState, config: TopicConfig, want: int, lock_ms):
        """Lock up to ``want`` records of one share-partition, reading more into its window if it has too few."""
        share = state.share
        await self.reader.follow_log_start(state)
        now = now_ms()
        if share.expire(now) and share.dead_lettering():
            self.dead_letters.due()
        acquired = share.acquire(now, want, lock_ms)
        if len(acquired) < want and (share.restored or share.end_offset < state.log_end_known
                                     or self.remote_leaders.may_have_more(state)):
            await self.reader.read(state, config)
            await self.reader.read_restored(state, config)
            acquired += share.acquire(now_ms(), want - len(acquired), lock_ms)
        return acquired

    def _next_due(self, group_id: str, topic: str, count: int) -> int | None:
        """The receiver waits: until when at most (the next lock expiry or delayed record)."""
        now = now_ms()
        next_due = None
        for i in range(count):
            state = self.held.loaded.get((group_id, topic, i))
            due = None if state is None else state.share.next_due(now)
            if due is not None and (next_due is None or due < next_due):
                next_due = due
        return next_due

    # -- acknowledge ----------------------------------------------------------------------------------

    async def acknowledge(self, request: m.ShareAcknowledgeRequest) -> m.ShareAcknowledgeResponse:
        """Apply every acknowledgement, write what changed, then answer (a reject: once its dead letter is
        written, or after DEAD_LETTER_WAIT_S)."""
        index = self.coordinator.check_coordinator(request.group_id)
        _check_accept_ranges(request.accepts)
        await self._load_restored(request)
        now = now_ms()
        done = _Acknowledged()
        results = [self._apply(request, ack, now, done) for ack in request.acks]
        accept_failures = []
        for accepts in request.accepts:
            accept_failures += self._accept_range(request, accepts, now, done)
        used = time.monotonic()
        for state in done.touched.values():
            state.share.advance_start()
            state.used = used
        if done.touched:
            await asyncio.gather(*(self.writer.persist(index, s) for s in done.touched.values()))
            if done.dead:
                self.dead_letters.due()
        if done.released or done.held_back:
            self.held.wake(request.group_id, request.topic)
        if done.dead:
            await self.dead_letters.written(list(done.touched.values()), request.group_id, request.topic)
        return m.ShareAcknowledgeResponse(results=results, accept_failures=accept_failures)

    async def _load_restored(self, request: m.ShareAcknowledgeRequest) -> None:
        """Partitions acknowledged before anyone received here since a failover: load their state first."""
        for partition in {ack.partition for ack in request.acks} | {r.partition for r in request.accepts}:
            key = (request.group_id, request.topic, partition)
            if key in self.held.restored:
                await self._load(*key, settings_of(self.coordinator.topic_config(request.topic)))

    def _apply(self, request: m.ShareAcknowledgeRequest, ack: m.ShareAck, now: int, done: _Acknowledged) -> m.ShareAckResult:
        """One accept, release, reject or extend; its result, with the error that refused it."""
        result = m.ShareAckResult(partition=ack.partition, offset=ack.offset)
        state = self.held.loaded.get((request.group_id, request.topic, ack.partition))
        try:
            if ack.action not in ACTIONS:
                raise errors.InvalidRequestError(f"unknown action {ack.action!r}: use one of {', '.join(ACTIONS)}")
            if state is None:
                raise errors.InvalidRecordStateError(
                    f"{request.topic}-{ack.partition} offset {ack.offset} is not locked by group {request.group_id!r}")
            share = state.share
            if ack.action in ("accept", "reject"):
                done.note_slot_freed(state, ack.partition)
            if ack.action == "accept":
                share.accept(ack.offset, ack.delivery_count, now, advance=False)  # once for them all, in acknowledge
                state.records.pop(ack.offset, None)
            elif ack.action == "release":
                delay = None if ack.delay_ms < 0 else ack.delay_ms
                done.dead |= share.release(ack.offset, ack.delivery_count, now, delay_ms=delay, error=ack.error)
                done.released = True
            elif ack.action == "reject":
                share.reject(ack.offset, ack.delivery_count, now, error=ack.error)
                done.dead = True
            else:
                result.lock_deadline_ms = share.extend(ack.offset, ack.delivery_count, now, ack.lock_ms)
        except errors.BrokerError as exc:
            result.error_code, result.error_message = exc.errno, exc.message
        else:
            done.changed(state)
        return result

    def _accept_range(self, request: m.ShareAcknowledgeRequest, accepts: m.AcceptRange, now: int,
                      done: _Acknowledged) -> list[m.ShareAckResult]:
        """Accept a range of offsets; the results of those refused."""
        state = self.held.loaded.get((request.group_id, request.topic, accepts.partition))
        first, last = accepts.first_offset, accepts.last_offset
        if state is None:
            error = errors.InvalidRecordStateError(
                f"{request.topic}-{accepts.partition} has no record locked by group {request.group_id!r}")
            return [m.ShareAckResult(partition=accepts.partition, offset=o, error_code=error.errno,
                                     error_message=error.message) for o in range(first, last + 1)]
        done.note_slot_freed(state, accepts.partition)
        failed = state.share.accept_range(first, last, accepts.delivery_count, now)
        records = state.records
        for offset in range(first, last + 1):
            records.pop(offset, None)
        if not records:
            state.records = {}  # not the emptied table a full window grew (see SharePartition.advance_start)
        if len(failed) <= last - first:  # something was accepted
            done.changed(state)
        return [m.ShareAckResult(partition=accepts.partition, offset=offset, error_code=exc.errno,
                                 error_message=exc.message) for offset, exc in failed]

    # -- background: lock expiry and idle share-partitions ------------------------------------------------

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(EXPIRE_CHECK_S)
            now = now_ms()
            for state in list(self.held.loaded.values()):
                if state.share.expire(now):
                    self.held.wake(state.group_id, state.topic)
                    if state.share.dead_lettering():
                        self.dead_letters.due()

    async def _unload_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(min(UNLOAD_CHECK_S, self.idle_unload_s))
            self.held.unload_idle(time.monotonic() - self.idle_unload_s)
