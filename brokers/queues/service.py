"""The queue service: share-partitions of queue groups, on the group's coordinator.

For each (group, topic, partition) it keeps a ``SharePartition`` (the state
machine) and the payloads of the records in its window, read from the
partition's leader (straight from the local log when that is this broker).
Every acknowledgement (accept, release, reject, extend) is written to the
coordinator's internal partition and replicated before it is answered, as the
changes since the write before (``state_log``), so a write costs what changed,
not the whole window; whoever changed the state while a write was in flight is
carried by the next one. Acquisitions are written at once too, but receivers
get their records without waiting for that write (see ``_write_soon``).

Records that must be dead-lettered are written to the queue's dead-letter
topic by a background task with the headers below, then marked done. A crash
between the two writes can put a record in the dead-letter topic twice, never
zero times.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from brokers.queues.share_partition import QueueSettings, SharePartition, State
from brokers.queues.state_log import StateLog
from brokers.replication import Role
from brokers.storage import TopicConfig
from tideway.aio import Signal, cancel_and_wait
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.headers import DEADLINE_HEADER, DLQ_HEADERS
from tideway.protocol.names import own_group_name, split_tenant_prefix
from tideway.record.batch import Record, decode_records, iter_batches, read_header

if TYPE_CHECKING:
    from brokers.replication import Partition
    from tideway.native.client import TidewayClient

__all__ = ["DEADLINE_HEADER", "QueueService"]

log = logging.getLogger(__name__)

WINDOW_RECORDS_MAX = 20_000  # records read ahead of the oldest unfinished one, per share-partition
READ_BYTES = 256 << 10
MAX_WAIT_MS = 30_000
IDLE_RECHECK_S = 1.0  # a waiting receive looks again at least this often though nothing woke it
WATCH_WAIT_MS = 5_000  # how long one long-polling fetch from a remote leader waits for new records
WATCH_KEEP_S = 1.0  # a watch that brought records asks again if the share-partition was used this recently
WATCH_ANSWERS_MAX = 1_000  # answers of one watch's fetch (it streams: see QueueService._follow)
STOP_WRITE_WAIT_S = 2.0  # how long a stopping broker waits for acquisitions' writes in flight
# How long acquisitions wait to be written: an acknowledgement that comes meanwhile carries them,
# and records accepted below the start need no row at all (a worker acking within a few ms of
# receiving, the common case, then costs one state write instead of two). Longer than the gateway's
# ack linger (10 ms) and a round trip: at 5 ms, the acquisitions of WebSocket subscribers' messages
# were written on their own, a third of the coordinator's state writes at 1,000 msgs/s.
ACQUISITION_WRITE_DELAY_S = 0.05
IDLE_UNLOAD_S = 300.0  # a share-partition nobody received from or acknowledged on for this long is unloaded
UNLOAD_CHECK_S = 10.0  # how often idle share-partitions are looked for
DEAD_LETTER_WAIT_S = 5.0  # how long a reject (or a release at the delivery limit) waits for its dead letter's write
ACTIONS = ("accept", "release", "reject", "extend")
# Offsets one acknowledgement request may accept through ranges: a few bytes name a long range, and each
# offset costs a step of the loop (a window holds at most WINDOW_RECORDS_MAX records per partition).
ACCEPTED_PER_REQUEST_MAX = 100_000


def settings_of(config: TopicConfig) -> QueueSettings:
    return QueueSettings(
        visibility_timeout_ms=config.visibility_timeout_ms,
        max_deliveries=config.max_deliveries,
        retry_backoff_ms=config.retry_backoff_ms,
        retry_backoff_max_ms=config.retry_backoff_max_ms,
        fifo=config.is_fifo,
        max_in_flight=config.max_in_flight,
    )


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(eq=False)
class _Share:
    group_id: str
    topic: str
    partition: int
    share: SharePartition
    state_log: StateLog
    records: dict[int, Record] = field(default_factory=dict)
    version: int = 0  # bumped on every change a consumer may be told about
    taken: int = 0  # the version whose changes the latest write carries
    persisted: int = 0  # the version replicated
    writes: list[tuple[int, asyncio.Future]] = field(default_factory=list)  # in flight: (version, done)
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    log_end_known: int = -1  # the leader's high watermark at the last read
    watching: asyncio.Task | None = None  # a long-polling fetch from a remote leader (see _watch)
    acquisitions_to_write: bool = False  # a write of acquisitions is due (see _write_soon)
    used: float = field(default_factory=time.monotonic)  # the last receive or acknowledgement (see _unload_idle)

    def unloadable(self) -> bool:
        """Nothing in flight, nothing to write or dead-letter, nobody reading: the state log holds it all."""
        share = self.share
        return (not share.in_flight and not share.restored and not share.dead_lettering() and not self.writes
                and self.persisted == self.version and not self.acquisitions_to_write and self.watching is None
                and not self.reading.locked())


class Coordinator(Protocol):
    """What the queue service needs of the group coordinator it runs on (``brokers.groups.coordinator``)."""

    def check_coordinator(self, group_id: str) -> int:
        """The internal partition of ``group_id``; raises unless this broker coordinates it (and has loaded it)."""

    async def set_type(self, index: int, group_id: str, group_type: str) -> None:
        """Record that ``group_id`` is a queue group (refused if it is a stream group)."""

    def topic_config(self, topic: str) -> TopicConfig:
        """The settings of ``topic`` (UnknownTopicOrPartitionError if there is none)."""

    async def write(self, index: int, records: list[tuple[list, object]]) -> None:
        """Append state records to internal partition ``index``; return once every in-sync replica has them."""

    def local_partition(self, topic: str, partition: int) -> Partition | None:
        """This broker's replica of ``topic``-``partition``, if it holds one."""


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


class QueueService:
    def __init__(self, coordinator: Coordinator, peer_client: Callable[[], TidewayClient],
                 on_delivered: Callable[[str, int, int], None] = lambda topic, messages, size: None,
                 idle_unload_s: float = IDLE_UNLOAD_S) -> None:
        self.coordinator = coordinator
        self.idle_unload_s = idle_unload_s
        self._on_delivered = on_delivered  # (topic, messages, bytes) delivered to receivers: the broker's traffic
        self._peer_client = peer_client  # a client of the cluster acting as this broker (remote leaders, dead letters)
        self.shares: dict[tuple[str, str, int], _Share] = {}
        self._restored: dict[tuple[str, str, int], dict] = {}  # replayed state logs, with "seq" (see restore)
        self._changed: dict[tuple[str, str], Signal] = {}
        self._round_robin: dict[tuple[str, str], int] = {}
        self._dead_letters = asyncio.Event()
        self._dead_letters_written = asyncio.Condition()  # notified after every pass that wrote dead letters
        self._tasks: list[asyncio.Task] = []
        self._acquisition_writes: set[asyncio.Task] = set()  # see _write_soon
        self._following: set[asyncio.Task] = set()  # see on_partition_states
        self._client = None
        self._producer = None

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._expire_forever()), loop.create_task(self._dead_letter_forever()),
                       loop.create_task(self._unload_idle_forever())]

    async def stop(self) -> None:
        if self._acquisition_writes:  # a clean shutdown keeps what receivers were told, if it can within a moment
            await asyncio.wait(self._acquisition_writes, timeout=STOP_WRITE_WAIT_S)
        await cancel_and_wait(*self._tasks, *self._acquisition_writes, *self._following,
                              *(s.watching for s in self.shares.values() if s.watching is not None))
        if self._producer is not None:
            await self._producer.stop()
        if self._client is not None:
            await self._client.close()

    # -- loading -------------------------------------------------------------------------------

    def restore(self, group_id: str, topic: str, partition: int, snapshot: dict, seq: int) -> None:
        """A share-partition's state as its log says (``state_log.replay``), up to write ``seq``."""
        self._restored[(group_id, topic, partition)] = {**snapshot, "seq": seq}
        self._dead_letters.set()

    def forget_topic(self, topic: str) -> list[tuple[str, int, int]]:
        """``topic`` was deleted: drop its share-partitions (loaded or not); (group, partition, writes numbered so
        far: which state-log slots hold something) of each dropped."""
        dropped = []
        for key in [k for k in (*self.shares, *self._restored) if k[1] == topic]:
            seq = 0
            state = self.shares.pop(key, None)
            if state is not None:
                seq = state.state_log.seq
                for _version, done in state.writes:
                    done.cancel()
                if state.watching is not None:
                    state.watching.cancel()
            restored = self._restored.pop(key, None)
            if restored is not None:
                seq = max(seq, restored["seq"])
            dropped.append((key[0], key[2], seq))
        for key in [k for k in self._changed if k[1] == topic]:
            self._changed.pop(key).set()  # receivers waiting on it look again (and find the topic gone)
            self._round_robin.pop(key, None)
        return dropped

    def unload_group(self, group_id: str) -> None:
        for key in [k for k in self.shares if k[0] == group_id]:
            share = self.shares.pop(key)
            for _version, done in share.writes:
                done.cancel()  # whoever waits on it finds the group gone
            if share.watching is not None:
                share.watching.cancel()
        for key in [k for k in self._restored if k[0] == group_id]:
            del self._restored[key]

    async def _share(self, group_id: str, topic: str, partition: int, settings: QueueSettings) -> _Share:
        key = (group_id, topic, partition)
        found = self.shares.get(key)
        if found is not None:
            found.share.settings = settings
            found.used = time.monotonic()
            return found
        snapshot = self._restored.pop(key, None)
        state_log = StateLog(group_id, topic, partition)
        if snapshot is not None:
            share = SharePartition.restore(snapshot, settings)
            state_log.start_after(snapshot["seq"])
        else:
            # A new queue group starts at the oldest record the partition still has.
            share = SharePartition(await self._log_start(topic, partition), settings)
        found = self.shares.setdefault(key, _Share(group_id, topic, partition, share, state_log))
        return found

    # -- reading the partition ------------------------------------------------------------------

    def _local_leader(self, topic: str, partition: int):
        local = self.coordinator.local_partition(topic, partition)
        return local if local is not None and local.role is Role.LEADER else None

    async def _log_start(self, topic: str, partition: int) -> int:
        local = self._local_leader(topic, partition)
        if local is not None:
            return local.log.log_start_offset
        client = await self._cluster_client()
        offset, _ = await client.list_offset(topic, partition, m.EARLIEST_TIMESTAMP)
        return offset

    async def _read(self, state: _Share, config: TopicConfig) -> None:
        """Read records after the window into it (one read)."""
        async with state.reading:
            share = state.share
            if share.window_records >= WINDOW_RECORDS_MAX and not share.restored:
                return
            offset = share.end_offset
            local = self._local_leader(state.topic, state.partition)
            if local is not None:
                log_ = local.log
                if offset >= log_.high_watermark:
                    state.log_end_known = log_.high_watermark
                    return
                if offset < log_.log_start_offset:
                    share.move_start(log_.log_start_offset)
                    offset = share.end_offset
                read = log_.read(offset, READ_BYTES)
                data, high_watermark = read.records, read.high_watermark
            else:
                data, high_watermark = await self._fetch_remote(state, offset)
            self._add(state, config, data, offset, high_watermark)

    def _add(self, state: _Share, config: TopicConfig, data: bytes, offset: int, high_watermark: int) -> None:
        """Records read from ``offset`` into the window (the caller holds ``state.reading``)."""
        state.log_end_known = high_watermark
        if not data:
            return
        share = state.share
        delay = config.delivery_delay_ms
        added = []
        append, records = added.append, state.records
        end = offset
        for position, _base, _size in iter_batches(data):
            for record in decode_records(data, position):
                record_offset = record.offset
                if record_offset < offset:
                    continue
                available_at = record.timestamp_ms + delay if delay else 0
                if record.headers:
                    for name, value in record.headers:
                        if name == DEADLINE_HEADER and value:
                            try:
                                available_at = int(value)
                            except ValueError:
                                pass
                append((record_offset, record.key, available_at))
                records[record_offset] = record
            end = max(end, read_header(data, position).next_offset)
        share.add_records(added, end)

    async def _fetch_remote(self, state: _Share, offset: int) -> tuple[bytes, int]:
        client = await self._cluster_client()
        try:
            result = await client.fetch(state.topic, state.partition, offset, max_bytes=READ_BYTES, retry_for_s=0,
                                        replica_id=m.QUEUE_READER)
        except errors.OffsetOutOfRangeError:
            start = await self._log_start(state.topic, state.partition)
            if offset < start:
                state.share.move_start(start)
            return b"", state.log_end_known
        except errors.TidewayError:
            return b"", state.log_end_known  # the receivers' next read tries again (metadata is refreshed)
        return result.records, result.high_watermark

    async def _cluster_client(self):
        if self._client is None:
            # As a cluster peer, through this broker's internal listener: its metadata names peers' internal listeners.
            client = self._peer_client()
            await client.start()
            if self._client is None:
                self._client = client
            else:
                await client.close()
        return self._client

    # -- persistence -----------------------------------------------------------------------------

    async def _persist(self, index: int, state: _Share) -> None:
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
                    if self.shares.get((state.group_id, state.topic, state.partition)) is not state:
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

    def _write_soon(self, index: int, state: _Share) -> None:
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

    async def _write_acquisitions(self, index: int, state: _Share) -> None:
        try:
            await asyncio.sleep(ACQUISITION_WRITE_DELAY_S)
            state.acquisitions_to_write = False
            await self._persist(index, state)  # nothing to do when an acknowledgement's write carried them
        except errors.TidewayError as exc:  # handed back to the state log: the next write carries them
            log.info("%s/%s-%d: acquisitions not written yet: %s", state.group_id, state.topic, state.partition, exc)

    def _wake(self, group_id: str, topic: str) -> None:
        event = self._changed.get((group_id, topic))
        if event is not None:
            event.set()

    def on_data(self, topic: str) -> None:
        """New records in a local partition of ``topic``: wake waiting receivers."""
        for (_group, waiting_topic), event in self._changed.items():
            if waiting_topic == topic:
                event.set()

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
        key = (request.group_id, request.topic)
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = Signal()
        while True:
            event.clear()
            got, touched, next_due = await self._acquire_once(request, config, settings, lock_ms)
            if touched:
                for state in touched:
                    self._write_soon(index, state)
                if got:
                    self._on_delivered(request.topic, len(got), _delivered_bytes(got))
                return m.ShareAcquireResponse(records=got)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return m.ShareAcquireResponse()
            self._watch_remote_leaders(request.group_id, request.topic, config)
            # Woken by what makes records available (local appends, a remote leader's long poll,
            # acknowledgements, releases) or by the next lock expiry or delay; the recheck is a
            # safety net, not a poll: waiting receivers cost nothing while nothing happens.
            wait = min(remaining, IDLE_RECHECK_S)
            if next_due is not None:
                wait = min(wait, max(0.001, (next_due - _now_ms()) / 1000))
            await event.wait(wait)
            coordinator.check_coordinator(request.group_id)

    async def _acquire_once(self, request, config: TopicConfig, settings: QueueSettings, lock_ms):
        count = config.partitions
        start = self._round_robin.get((request.group_id, request.topic), 0)
        self._round_robin[(request.group_id, request.topic)] = start + 1
        got: list[m.AcquiredRecord] = []
        touched: list[_Share] = []
        next_due: int | None = None
        for i in range(count):
            partition = (start + i) % count
            want = request.max_records - len(got)
            if want <= 0:
                break
            state = await self._share(request.group_id, request.topic, partition, settings)
            share = state.share
            now = _now_ms()
            if share.expire(now) and share.dead_lettering():
                self._dead_letters.set()
            acquired = share.acquire(now, want, lock_ms)
            if len(acquired) < want and (share.restored or share.end_offset < state.log_end_known or self._may_have_more(state)):
                await self._read(state, config)
                while share.restored:  # restored (a failover, or unloaded while idle): read up to its last row now
                    before = share.end_offset
                    await self._read(state, config)
                    if share.end_offset == before:
                        break
                acquired += share.acquire(_now_ms(), want - len(acquired), lock_ms)
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
        if not got:  # the receiver waits: until when at most
            now = _now_ms()
            for i in range(count):
                state = self.shares.get((request.group_id, request.topic, i))
                due = None if state is None else state.share.next_due(now)
                if due is not None and (next_due is None or due < next_due):
                    next_due = due
        return got, touched, next_due

    def _watch_remote_leaders(self, group_id: str, topic: str, config: TopicConfig) -> None:
        """Receivers are waiting: long-poll the remote leaders, so that new records wake them at once.

        Partitions this broker leads wake them through ``on_data`` when their
        HW moves; for the others, one fetch per share-partition waits at the leader until
        it has committed records past the window, which go into the window.
        """
        for partition in range(config.partitions):
            state = self.shares.get((group_id, topic, partition))
            if state is None or state.watching is not None or state.share.window_records >= WINDOW_RECORDS_MAX:
                continue
            if self._local_leader(topic, partition) is None:
                state.watching = asyncio.get_running_loop().create_task(self._watch(state, config))

    async def _watch(self, state: _Share, config: TopicConfig) -> None:
        """Follow a remote leader past the window; go on while records come and receivers are active.

        Following again at once after a fetch that brought records (rather than when a receiver next
        waits) keeps a fetch out while traffic flows: the receivers woken by these records then
        find it out there and do not ask the leader themselves (an immediate fetch that was empty
        half the time: about one request per message at 1,000 msgs/s through the gateway).
        """
        key = (state.group_id, state.topic, state.partition)
        try:
            client = await self._cluster_client()
            while (await self._follow(client, state, config) and self.shares.get(key) is state
                   and time.monotonic() - state.used <= WATCH_KEEP_S and state.share.window_records < WINDOW_RECORDS_MAX):
                pass
        except (errors.TidewayError, OSError) as exc:
            log.debug("watching %s-%d for group %s: %s", state.topic, state.partition, state.group_id, exc)
            await asyncio.sleep(0.1)
        finally:
            if state.watching is asyncio.current_task():  # not a newer watch (see on_partition_states)
                state.watching = None
        self._wake(state.group_id, state.topic)

    def on_partition_states(self, states: list[m.PartitionState]) -> None:
        """The controller's new partition states: drop watches on leaders that lost their partition.

        A watch waits at its leader up to WATCH_WAIT_MS (plus the read slack); on a frozen leader
        that held every read of the partition for the whole wait, since receivers leave a watched
        partition to its watch (issue 40). The watches go now, the cluster client learns the new
        leaders, and the receivers are woken to read from them.
        """
        client = self._client
        if client is None or not self.shares:
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
        for share in self.shares.values():
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
            self._wake(group_id, topic)

    async def _follow(self, client: TidewayClient, state: _Share, config: TopicConfig) -> bool:
        """One fetch from the window's end that streams: each answer goes into the window as it comes.

        The fetch stays open at the leader for up to WATCH_WAIT_MS and answers each time records
        are committed there, so a message costs the leader an answer but no request (a fetch per
        answer was 0.67 requests a message at 1,000 msgs/s through the gateway, with 3 partitions
        on 3 brokers). Returns whether it brought records. If the window moved meanwhile, the
        share-partition went or the window is full, the rest of the stream is left to run out
        (the connection drops what it still sends).
        """
        key = (state.group_id, state.topic, state.partition)
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
                        if (state.share.end_offset != offset or self.shares.get(key) is not state
                                or state.share.window_records >= WINDOW_RECORDS_MAX):
                            return brought
                        self._add(state, config, result.records, offset, result.high_watermark)
                        offset = state.share.end_offset
                        brought = brought or bool(result.records)
                if brought:
                    self._wake(state.group_id, state.topic)  # this task is still the watch: the woken do not fetch
            fetching.result()  # its error, if it failed
        finally:
            fetching.cancel()
        return brought

    def _may_have_more(self, state: _Share) -> bool:
        local = self._local_leader(state.topic, state.partition)
        if local is not None:
            return state.share.end_offset < local.log.high_watermark
        # A remote leader: ask it, unless a long poll is out there already (what it brings goes
        # into the window and wakes the receivers). Asking on every pass made each waiting
        # receiver a fetch every pass.
        return state.watching is None

    # -- acknowledge ----------------------------------------------------------------------------------

    async def acknowledge(self, request: m.ShareAcknowledgeRequest) -> m.ShareAcknowledgeResponse:
        coordinator = self.coordinator
        index = coordinator.check_coordinator(request.group_id)
        _check_accept_ranges(request.accepts)
        for partition in {ack.partition for ack in request.acks} | {r.partition for r in request.accepts}:
            key = (request.group_id, request.topic, partition)
            if key in self._restored:  # acknowledged before anyone received here since a failover
                await self._share(*key, settings_of(coordinator.topic_config(request.topic)))
        now = _now_ms()
        results = []
        touched: dict[int, _Share] = {}
        released = dead = False
        # An accept or reject lets receivers waiting on the in-flight cap or a busy FIFO key go on.
        held_back = set()
        for ack in request.acks:
            result = m.ShareAckResult(partition=ack.partition, offset=ack.offset)
            state = self.shares.get((request.group_id, request.topic, ack.partition))
            try:
                if ack.action not in ACTIONS:
                    raise errors.InvalidRequestError(f"unknown action {ack.action!r}: use one of {', '.join(ACTIONS)}")
                if state is None:
                    raise errors.InvalidRecordStateError(
                        f"{request.topic}-{ack.partition} offset {ack.offset} is not locked by group {request.group_id!r}"
                    )
                share = state.share
                if ack.action in ("accept", "reject") and (share.in_flight >= share.settings.max_in_flight or share.settings.fifo):
                    held_back.add(ack.partition)
                if ack.action == "accept":
                    share.accept(ack.offset, ack.delivery_count, now, advance=False)  # once for them all, below
                    state.records.pop(ack.offset, None)
                elif ack.action == "release":
                    dead |= share.release(ack.offset, ack.delivery_count, now, delay_ms=None if ack.delay_ms < 0 else ack.delay_ms, error=ack.error)
                    released = True
                elif ack.action == "reject":
                    share.reject(ack.offset, ack.delivery_count, now, error=ack.error)
                    dead = True
                else:
                    result.lock_deadline_ms = share.extend(ack.offset, ack.delivery_count, now, ack.lock_ms)
            except errors.BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            else:
                state.version += 1
                touched[id(state)] = state
            results.append(result)
        accept_failures = []
        for accepts in request.accepts:
            state = self.shares.get((request.group_id, request.topic, accepts.partition))
            first, last = accepts.first_offset, accepts.last_offset
            if state is None:
                error = errors.InvalidRecordStateError(f"{request.topic}-{accepts.partition} has no record locked by group {request.group_id!r}")
                accept_failures += [m.ShareAckResult(partition=accepts.partition, offset=o, error_code=error.errno,
                                                     error_message=error.message) for o in range(first, last + 1)]
                continue
            share = state.share
            if share.in_flight >= share.settings.max_in_flight or share.settings.fifo:
                held_back.add(accepts.partition)
            failed = share.accept_range(first, last, accepts.delivery_count, now)
            records = state.records
            for offset in range(first, last + 1):
                records.pop(offset, None)
            if not records:
                state.records = {}  # not the emptied table a full window grew (see SharePartition.advance_start)
            if failed:
                accept_failures += [m.ShareAckResult(partition=accepts.partition, offset=offset, error_code=exc.errno,
                                                     error_message=exc.message) for offset, exc in failed]
            if len(failed) <= last - first:  # something was accepted
                state.version += 1
                touched[id(state)] = state
        used = time.monotonic()
        for state in touched.values():
            state.share.advance_start()
            state.used = used
        if touched:
            await asyncio.gather(*(self._persist(index, s) for s in touched.values()))
            if dead:
                self._dead_letters.set()
        if released or held_back:
            self._wake(request.group_id, request.topic)
        if dead:
            # A rejected message is in the dead-letter topic when the reject is answered (a redrive or a
            # listing started at once sees it). Past the wait it is still written: its state says so.
            try:
                await asyncio.wait_for(self._until_dead_lettered(list(touched.values())), DEAD_LETTER_WAIT_S)
            except TimeoutError:
                log.info("group %s: dead letters of %s not written within %.0f s; they will be", request.group_id,
                         request.topic, DEAD_LETTER_WAIT_S)
        return m.ShareAcknowledgeResponse(results=results, accept_failures=accept_failures)

    async def _until_dead_lettered(self, states: list[_Share]) -> None:
        async with self._dead_letters_written:
            while any(state.share.dead_lettering() for state in states if self.shares.get(
                    (state.group_id, state.topic, state.partition)) is state):
                await self._dead_letters_written.wait()

    def held(self) -> tuple[int, int, int]:
        """(share-partitions loaded, unloaded or not loaded yet, records in the loaded windows), for metrics."""
        return len(self.shares), len(self._restored), sum(s.share.window_records for s in self.shares.values())

    def group_ids(self) -> set[str]:
        """Queue groups with state held here (loaded, or restored and not loaded yet)."""
        return {group_id for group_id, _topic, _partition in (*self.shares, *self._restored)}

    def positions(self) -> dict[str, list[tuple[str, int, int, int]]]:
        """Per queue group held here: (topic, partition, oldest record not yet accepted or dead-lettered, records in
        flight), one pass."""
        out: dict[str, list[tuple[str, int, int, int]]] = {}
        for (group_id, topic, partition), state in self.shares.items():
            out.setdefault(group_id, []).append((topic, partition, state.share.start_offset, state.share.in_flight))
        for (group_id, topic, partition), snapshot in self._restored.items():
            in_flight = sum(1 for row in snapshot["entries"] if row[1] == State.ACQUIRED)
            out.setdefault(group_id, []).append((topic, partition, snapshot["start"], in_flight))
        return out

    def describe(self, group_id: str) -> list[m.SharePartitionDescription]:
        now = _now_ms()
        out = []
        for (g, topic, partition), state in self.shares.items():
            if g != group_id:
                continue
            counts = state.share.counts(now)
            out.append(
                m.SharePartitionDescription(
                    topic=topic, partition=partition, start_offset=state.share.start_offset, read_offset=state.share.end_offset,
                    available=counts["available"], delayed=counts["delayed"], in_flight=counts["in_flight"],
                    dead_lettering=counts["dead_lettering"],
                )
            )
        for (g, topic, partition), snapshot in self._restored.items():
            if g != group_id:
                continue
            # Not loaded (idle, or not received from since a failover): what its snapshot says; the
            # window is read again on the next receive.
            counts = SharePartition.restore(snapshot, QueueSettings()).counts(now)
            out.append(
                m.SharePartitionDescription(
                    topic=topic, partition=partition, start_offset=snapshot["start"], read_offset=snapshot["start"],
                    available=counts["available"], delayed=counts["delayed"], in_flight=counts["in_flight"],
                    dead_lettering=counts["dead_lettering"],
                )
            )
        out.sort(key=lambda d: (d.topic, d.partition))
        return out

    # -- background: lock expiry and dead letters --------------------------------------------------------

    async def _expire_forever(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            now = _now_ms()
            for state in list(self.shares.values()):
                if state.share.expire(now):
                    self._wake(state.group_id, state.topic)
                    if state.share.dead_lettering():
                        self._dead_letters.set()

    async def _unload_idle_forever(self) -> None:
        while True:
            await asyncio.sleep(min(UNLOAD_CHECK_S, self.idle_unload_s))
            self.unload_idle(time.monotonic() - self.idle_unload_s)

    def unload_idle(self, unused_since: float) -> int:
        """Unload share-partitions unused since ``unused_since`` (monotonic) with nothing outstanding.

        What stays is the snapshot a failover would replay (the start offset and
        rows of records delivered before): the window's records and their table
        go, and ``_share`` restores it on the next receive or acknowledgement.
        A hosted broker carries many idle groups; each costs a few hundred bytes
        so, not its last window. Returns how many were unloaded.
        """
        unloaded = 0
        for key, state in list(self.shares.items()):
            if state.used < unused_since and state.unloadable():
                del self.shares[key]
                self._restored[key] = {**state.share.snapshot(), "seq": state.state_log.seq}
                unloaded += 1
        if unloaded:
            log.debug("unloaded %d idle share-partition(s)", unloaded)
        return unloaded

    async def _dead_letter_forever(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._dead_letters.wait(), 1.0)
            except TimeoutError:
                pass
            self._dead_letters.clear()
            try:
                await self._write_dead_letters()
                async with self._dead_letters_written:
                    self._dead_letters_written.notify_all()
            except asyncio.CancelledError:
                raise
            except errors.TidewayError as exc:
                log.warning("dead-lettering failed (will retry): %s", exc)
                await asyncio.sleep(0.5)
                self._dead_letters.set()
            except Exception:
                log.exception("dead-lettering failed (will retry)")
                await asyncio.sleep(1)
                self._dead_letters.set()

    async def _write_dead_letters(self) -> None:
        coordinator = self.coordinator
        # Restored share-partitions with records to dead-letter must be read first.
        for key, snapshot in list(self._restored.items()):
            if any(row[1] in (State.DEAD_LETTERING, State.ACQUIRED) for row in snapshot["entries"]):
                try:
                    config = coordinator.topic_config(key[1])
                except errors.UnknownTopicOrPartitionError:
                    continue
                state = await self._share(*key, settings_of(config))
                while state.share.restored:
                    before = state.share.end_offset
                    await self._read(state, config)
                    if state.share.end_offset == before:
                        break
        for state in list(self.shares.values()):
            offsets = state.share.dead_lettering()
            if not offsets:
                continue
            try:
                config = coordinator.topic_config(state.topic)
                index = coordinator.check_coordinator(state.group_id)
            except errors.BrokerError:
                continue
            dlq = config.dead_letter_topic_for(state.topic)
            producer = await self._dlq_producer()
            await self._ensure_topic(dlq, config)
            futures = []
            for offset in offsets:
                record = state.records.get(offset)
                entry = state.share.entry(offset)
                if record is None or entry is None:
                    continue
                headers = [h for h in record.headers if h[0] not in DLQ_HEADERS] + [
                    ("tideway-dlq-origin-topic", split_tenant_prefix(state.topic)[1].encode()),  # the tenant's own name
                    ("tideway-dlq-origin-partition", str(state.partition).encode()),
                    ("tideway-dlq-origin-offset", str(offset).encode()),
                    ("tideway-dlq-group", own_group_name(state.group_id).encode()),
                    ("tideway-dlq-delivery-count", str(entry.count).encode()),
                    ("tideway-dlq-last-error", entry.error.encode()),
                    ("tideway-dlq-first-delivery-ms", str(entry.first_ms).encode()),
                    ("tideway-dlq-last-delivery-ms", str(entry.last_ms).encode()),
                ]
                future = await producer.send(dlq, record.value, key=record.key, headers=headers, timestamp_ms=record.timestamp_ms)
                futures.append((offset, future))
            for offset, future in futures:
                await future
                state.share.dead_lettered(offset)
                state.records.pop(offset, None)
                log.info("group %s: %s-%d offset %d dead-lettered to %s", state.group_id, state.topic, state.partition, offset, dlq)
            if futures:
                state.version += 1
                await self._persist(index, state)

    async def _dlq_producer(self):
        if self._producer is None:
            from tideway.native.producer import Producer

            producer = Producer(await self._cluster_client(), acks="all", linger_ms=1, delivery_timeout_ms=30_000)
            await producer.start()
            self._producer = producer
        return self._producer

    async def _ensure_topic(self, name: str, config: TopicConfig) -> None:
        client = await self._cluster_client()
        try:
            await client.partitions_for(name)
            return
        except errors.UnknownTopicOrPartitionError:
            pass
        try:
            await client.create_topic(name, partitions=1, replication_factor=config.replication_factor)
            log.info("created dead-letter topic %s", name)
        except errors.TopicAlreadyExistsError:
            pass
        for _ in range(50):
            try:
                await client.refresh_metadata([name])
                partitions = await client.partitions_for(name)
                if all(p.leader >= 0 for p in partitions):
                    return
            except errors.UnknownTopicOrPartitionError:
                pass
            await asyncio.sleep(0.1)
