"""The producer: batches records per partition and sends them to partition leaders.

Flow: ``send`` appends a record to the open batch of its partition (keyed
records by murmur2, unkeyed ones to a "sticky" partition, first chosen at
random, that moves to the next when its batch closes, as Kafka's producer
does). A batch closes when it reaches
``batch_size_bytes`` or has waited ``linger_ms``. The sender task writes
closed batches to their leaders, one request per broker holding every ready
batch for it, with at most ``in_flight_per_broker_max`` requests outstanding
per broker. Requests on one connection are appended in order, so records of a
partition keep the order they were sent in.

Retries: a batch refused with a retriable error that guarantees nothing was
written (not leader, unknown partition, not enough replicas, a key the broker
could not check yet) is retried after a metadata refresh, up to ``retries``
times. A broken connection or a timeout
is ambiguous (the batch may have been written): a plain producer fails the
batch, an idempotent one (the default with acks=all) retries it, because the
broker recognises a resent batch by its producer id and sequence numbers and
answers with the offsets it got the first time. Idempotent retries go on
until ``delivery_timeout_ms``.

An idempotent partition is resent as a whole and in sequence order: once one
of its batches needs resending, every later batch of that partition is held
(newer ones too) until nothing of it is in flight any more, then all of them
go out again, oldest first, ahead of everything else. Letting a newer batch
overtake an older one being retried makes the broker refuse it (out of
order), and with batches arriving faster than single retries drain, that
became a partition stalled until the delivery timeout after a failover
(issue 15).

Producer ids are random 62-bit numbers chosen here (the chance that two
producers pick the same one is negligible), so no extra round trip is needed.
If a batch fails for good (e.g. too large), the later batches of its
partition can never follow it in sequence: they fail too, and the producer
continues under a new producer id.

Ownership: all state belongs to the event loop's thread; ``send`` never awaits
between choosing a batch and appending to it.

Why one file of ~750 lines: the send path, the sender and the retries share one set of per-partition
bookkeeping (open batches, batches in flight, sequences held for a resend) that the hot path reads on
every record; split across classes, every record would pay an indirection. What a send returns is apart
(pending.py).
"""

from __future__ import annotations

import asyncio
import logging
import random
import secrets
import time
from collections import deque
from collections.abc import Iterable

from tideway.aio import Signal, cancel_and_wait
from tideway.native.client import TidewayClient
from tideway.native.partitioner import partition_for_key
from tideway.native.pending import (
    OpenBatch,
    RecordFuture,
    RecordMetadata,
    record_size_estimate,
    wait_records,
)
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record.batch import BatchBuilder
from tideway.record.compression import Compression

__all__ = ["Producer", "RecordFuture", "RecordMetadata", "record_size_estimate", "wait_records"]

log = logging.getLogger(__name__)


SWEEP_INTERVAL_S = 1.0  # how often batches past their delivery timeout are looked for (_fail_overdue)
REQUEST_STALL_S = 1.0  # a produce request unanswered this long has its leader checked (_watch_stalls) ...
STALL_CHECK_S = 0.5  # ... this often
DOUBT_S = 10.0  # a leader whose request failed or stalled is asked for metadata last for this long


# Retriable errors after which the batch may have been stored: only an idempotent producer, whose resends the
# broker recognises, may send it again. Every other retriable error guarantees nothing was written.
_AMBIGUOUS_ERRORS = (
    errors.ConnectionClosedError,
    errors.ClientTimeoutError,
    errors.RequestTimedOutError,
    errors.NotEnoughReplicasAfterAppendError,
    errors.StorageError,
)
IN_FLIGHT_BATCHES_PER_PARTITION_MAX = m.RECENT_BATCHES_MAX // 2


class Producer:
    def __init__(
        self,
        client: TidewayClient | str,
        *,
        acks: int | str = 1,
        linger_ms: int = 5,
        batch_size_bytes: int = 256 << 10,
        compression: str | None = None,
        retries: int | None = None,
        retry_backoff_ms: int = 100,
        in_flight_per_broker_max: int = 5,
        buffer_bytes_max: int = 64 << 20,
        request_bytes_max: int = 8 << 20,
        request_timeout_ms: int = 30_000,
        idempotent: bool | None = None,
        delivery_timeout_ms: int = 120_000,
        api_key: str | None = None,
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client = (TidewayClient(client, request_timeout_ms=request_timeout_ms, api_key=api_key)
                       if isinstance(client, str) else client)
        self.acks = -1 if acks in ("all", -1, "-1") else int(acks)
        if self.acks not in (-1, 0, 1):
            raise ValueError("acks must be 0, 1 or all")
        # Idempotence needs every write acknowledged by all in-sync replicas
        # (as in Kafka): with fewer, a failover can lose what it deduplicates.
        self.idempotent = self.acks == -1 if idempotent is None else idempotent
        if self.idempotent and self.acks != -1:
            raise ValueError("an idempotent producer needs acks=all")
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self._batch_flags = 0  # ATTRIBUTE_TRANSACTIONAL for a transactional producer's batches (transactions.py)
        self._transactional_id = ""  # ... and its id, in its produce requests
        self._new_producer_id()
        self.linger_s = linger_ms / 1000
        self.batch_size_bytes = batch_size_bytes
        self.compression = Compression.parse(compression)
        # Default: resend until delivery_timeout_ms when idempotent, else 5 times.
        self.retries = retries if retries is not None else (1 << 31 if (idempotent or (idempotent is None and acks in ("all", -1, "-1"))) else 5)
        self.retry_backoff_s = retry_backoff_ms / 1000
        self.in_flight_per_broker_max = in_flight_per_broker_max
        self.buffer_bytes_max = buffer_bytes_max
        self.request_bytes_max = request_bytes_max
        self.request_timeout_s = request_timeout_ms / 1000
        self._open: dict[tuple[str, int], OpenBatch] = {}
        self._ready: deque[OpenBatch] = deque()
        self._sticky: dict[str, int] = {}
        # Idempotent partitions being resent: their batches waiting, in any order, and the task resending them.
        self._resending: dict[tuple[str, int], list[OpenBatch]] = {}
        self._resenders: dict[tuple[str, int], asyncio.Task] = {}
        self._in_flight: dict[int, int] = {}  # requests per leader
        # Every unanswered request: its leader, batches and when it was written (see _watch_stalls).
        self._requests: dict[asyncio.Future, tuple[int, list[OpenBatch], float]] = {}
        self._stall_watch: asyncio.Task | None = None
        self._partition_in_flight: dict[tuple[str, int], int] = {}  # batches per partition
        self._unfinished: set[OpenBatch] = set()
        self._next_sweep = 0.0  # see _fail_overdue
        self._buffered_bytes = 0
        self._space = asyncio.Event()
        self._space.set()
        self._wakeup = Signal()
        self._sender: asyncio.Task | None = None
        self._metadata_refresh: asyncio.Task | None = None
        # Leaders whose requests failed or stalled lately -> until when metadata is asked of other brokers first:
        # a leader cut off from the controller and its followers (not from its clients) still says it leads,
        # and asking it again kept its partitions on it for as long as the cut lasted (issue 45).
        self._doubted: dict[int, float] = {}
        self._closing = False

    async def start(self) -> None:
        if self._own_client:
            await self.client.start()
        self._sender = asyncio.get_running_loop().create_task(self._send_loop())

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    # -- sending ------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | None = None,
        partition: int | None = None,
        headers: list[tuple[str, bytes | None]] | None = None,
        timestamp_ms: int | None = None,
        batch_bytes_max: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the returned awaitable resolves when it is acknowledged.

        Waits only while more than ``buffer_bytes_max`` are buffered.
        ``batch_bytes_max`` keeps this record's batch under a size (the topic's
        ``max.message.bytes``, which brokers apply to whole batches).
        """
        # Everything inline (the checks of _ready_to_append, _partition_for, _append): this runs once
        # per record, and the calls cost a seventh of it (measured: 6.2 -> 7.2 µs per send).
        partitions = self.client.topics.get(topic)
        if partitions is None or self._closing or self._buffered_bytes >= self.buffer_bytes_max:
            count = await self._ready_to_append(topic)
        else:
            count = len(partitions)
        if partition is None and key is None:
            sticky = self._sticky.get(topic)  # kept wrapped: the batch that closes on it moves it on (_close_batch)
            partition = (random.randrange(count) if sticky is None else sticky) % count
            self._sticky[topic] = partition
        elif partition is None or not 0 <= partition < count:
            partition = self._partition_for(topic, key, partition, count)
        if timestamp_ms is None:
            timestamp_ms = int(time.time() * 1000)
        limit = self.batch_size_bytes if batch_bytes_max is None else min(self.batch_size_bytes, batch_bytes_max)
        batch = self._open.get((topic, partition))
        if batch is None or (len(batch.builder) and batch.builder.size_bytes + record_size_estimate(key, value, headers) > limit):
            if self.linger_s:
                return self._append(topic, partition, timestamp_ms, key, value, headers, limit)  # a new batch
            # linger 0: written from here when nothing is in flight; the sender task is woken only otherwise
            # (woken for a batch already gone, it took a loop turn for nothing, on a core the delivery needs).
            future = self._append(topic, partition, timestamp_ms, key, value, headers, limit, wake=False)
            if not self._send_at_once(future._batch):
                self._wakeup.set()
            return future
        builder = batch.builder
        before = builder.size_bytes
        offset_delta = builder.append(timestamp_ms, key, value, headers)
        after = builder.size_bytes
        self._buffered_bytes += after - before
        if after >= limit:
            self._close_batch(batch)
        return RecordFuture(batch, offset_delta, timestamp_ms)

    async def send_many(
        self,
        topic: str,
        records: Iterable[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int | None]],
        *,
        batch_bytes_max: int | None = None,
    ) -> list[RecordFuture]:
        """Queue ``records`` — (value, key, headers, partition or None) each — in order; as ``send`` for each.

        The checks, the wait for buffer space and the timestamp are done once
        for all of them: a gateway publishing a request's messages spent a
        third of its time in ``send``'s per-call work.
        """
        count = await self._ready_to_append(topic)
        timestamp_ms = int(time.time() * 1000)
        limit = self.batch_size_bytes if batch_bytes_max is None else min(self.batch_size_bytes, batch_bytes_max)
        records = records if isinstance(records, list) else list(records)
        futures: list[RecordFuture] = []
        append, partition_for = self._append, self._partition_for
        index, end = 0, len(records)
        while index < end:
            value, key, headers, partition = records[index]
            if key is not None or partition is not None:
                futures.append(append(topic, partition_for(topic, key, partition, count), timestamp_ms, key, value, headers, limit))
                index += 1
                continue
            # A run of records for the sticky partition (no key, no partition): into its batch in one loop
            # (BatchBuilder.extend), where a call of _append per record cost as much as the encoding.
            stop = index + 1
            while stop < end and records[stop][1] is None and records[stop][3] is None:
                stop += 1
            while index < stop:
                partition = partition_for(topic, None, None, count)
                batch = self._open.get((topic, partition)) or self._new_batch(topic, partition)
                builder = batch.builder
                first, before = len(builder), builder.size_bytes
                added = builder.extend(timestamp_ms, records, index, stop, limit) - index
                self._buffered_bytes += builder.size_bytes - before
                futures.extend([RecordFuture(batch, delta, timestamp_ms) for delta in range(first, first + added)])
                index += added
                if index < stop or builder.size_bytes >= limit:  # full: the sticky partition moves on
                    self._close_batch(batch)
        return futures

    async def _ready_to_append(self, topic: str) -> int:
        """Wait for buffer space; return the topic's partition count."""
        if self._closing:
            raise RuntimeError("producer is stopped")
        partitions = self.client.topics.get(topic)
        if partitions is None:
            partitions = await self.client.partitions_for(topic)
        while self._buffered_bytes >= self.buffer_bytes_max:
            self._space.clear()
            await self._space.wait()
        return len(partitions)

    def _partition_for(self, topic: str, key: bytes | None, partition: int | None, count: int) -> int:
        if partition is None:
            if key is not None:
                return partition_for_key(key, count)
            # The sticky partition, kept wrapped: the batch that closes on it moves it on (_close_batch).
            sticky = self._sticky.get(topic)
            partition = (random.randrange(count) if sticky is None else sticky) % count
            self._sticky[topic] = partition
            return partition
        if not 0 <= partition < count:
            raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} has no partition {partition}")
        return partition

    def _append(self, topic: str, partition: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
                headers: list[tuple[str, bytes | None]] | None, limit: int, *, wake: bool = True) -> RecordFuture:
        batch = self._open.get((topic, partition))
        if batch is not None and len(batch.builder) and batch.builder.size_bytes + record_size_estimate(key, value, headers) > limit:
            self._close_batch(batch)  # the record would push the batch over the limit: it starts the next one
            batch = None
        if batch is None:
            batch = self._new_batch(topic, partition, wake=wake)
        builder = batch.builder
        before = builder.size_bytes
        offset_delta = builder.append(timestamp_ms, key, value, headers)
        after = builder.size_bytes
        self._buffered_bytes += after - before
        if after >= limit:
            self._close_batch(batch)
        return RecordFuture(batch, offset_delta, timestamp_ms)

    def _new_batch(self, topic: str, partition: int, *, wake: bool = True) -> OpenBatch:
        batch = self._open[(topic, partition)] = OpenBatch(topic, partition, BatchBuilder(self.compression,
                                                                                          flags=self._batch_flags))
        self._unfinished.add(batch)
        if wake:
            self._wakeup.set()
        return batch

    async def send_and_wait(self, topic: str, value: bytes | None, **kwargs) -> RecordMetadata:
        return await (await self.send(topic, value, **kwargs))

    async def flush(self) -> None:
        """Send everything buffered now and wait until all of it is answered."""
        for batch in list(self._open.values()):
            self._close_batch(batch)
        pending = [batch.future for batch in self._unfinished]
        if pending:
            await asyncio.wait(pending)

    async def stop(self, timeout_s: float | None = None) -> None:
        """Flush, then stop the sender. With ``timeout_s``, wait at most that long for answers (a process shutting
        down while its cluster does): what is unanswered then is abandoned."""
        if self._sender is None:
            return
        if timeout_s is None:
            await self.flush()
        else:
            try:
                await asyncio.wait_for(self.flush(), timeout_s)
            except TimeoutError:
                log.info("producer stopped with %d batch(es) unanswered after %.1f s", len(self._unfinished), timeout_s)
        self._closing = True
        await cancel_and_wait(self._sender)
        await cancel_and_wait(self._stall_watch)
        self._sender = None
        if self._own_client:
            await self.client.close()

    def _new_producer_id(self) -> None:
        self.producer_id = secrets.randbits(62) if self.idempotent else -1
        self.producer_epoch = 0 if self.idempotent else -1
        self._sequences: dict[tuple[str, int], int] = {}

    def _close_batch(self, batch: OpenBatch, *, wake: bool = True) -> None:
        key = (batch.topic, batch.partition)
        if self._open.get(key) is batch:
            del self._open[key]
            if self._sticky.get(batch.topic) == batch.partition:
                self._sticky[batch.topic] = batch.partition + 1  # send() wraps it
            if self.idempotent:
                builder = batch.builder
                builder.producer_id, builder.producer_epoch = self.producer_id, self.producer_epoch
                builder.base_sequence = self._sequences.get(key, 0)
                self._sequences[key] = builder.base_sequence + len(builder)
            batch.data = batch.builder.build()
            self._ready.append(batch)
            if wake:
                self._wakeup.set()

    def _send_at_once(self, batch: OpenBatch) -> bool:
        """With ``linger_ms=0``, write a new batch from ``send`` itself when its leader has nothing in flight.

        Saves the sender task's turn (a loop iteration before the write) for a
        producer sending one record at a time. Records that follow before the
        answer go in the next batch, sent on the sender's turn as before, so a
        loop of sends still batches (one extra request per burst at most).
        """
        key = (batch.topic, batch.partition)
        if self._ready or key in self._resending or self._open.get(key) is not batch:
            return False  # others wait to go first, or the batch is closed and queued already
        try:
            leader = self.client.leader_for(batch.topic, batch.partition)
        except errors.TidewayError:
            return False
        connection = self.client.open_connection(leader)
        if connection is None or self._in_flight.get(leader, 0):
            return False
        self._close_batch(batch, wake=False)
        self._ready.remove(batch)
        self._send_request(leader, connection, [batch])
        return True

    # -- the sender task -------------------------------------------------------------

    async def _send_loop(self) -> None:
        while True:
            self._wakeup.clear()
            now = time.monotonic()
            next_deadline = None
            waiting = None  # partitions with a batch in _ready, looked up once a turn when needed
            for batch in list(self._open.values()):
                deadline = batch.created_monotonic + self.linger_s
                if deadline <= now:
                    # As Kafka's accumulator: a batch whose partition could not be sent now stays
                    # open and takes the records that follow, so under load requests grow instead
                    # of queueing one-record batches (an answer wakes this loop).
                    if waiting is None:
                        waiting = {(b.topic, b.partition) for b in self._ready}
                    if self._can_send_now(batch, waiting):
                        self._close_batch(batch)
                elif next_deadline is None or deadline < next_deadline:
                    next_deadline = deadline
            if self._ready:
                await self._send_ready()
            if self._unfinished and now >= self._next_sweep:
                self._next_sweep = now + SWEEP_INTERVAL_S
                self._fail_overdue(now)
            timeout = None if next_deadline is None else max(next_deadline - time.monotonic(), 0)
            if self._unfinished:  # look for overdue batches now and then, even with nothing to send
                timeout = SWEEP_INTERVAL_S if timeout is None else min(timeout, SWEEP_INTERVAL_S)
            if not self._wakeup.is_set():
                await self._wakeup.wait(timeout)

    def _can_send_now(self, batch: OpenBatch, waiting: set[tuple[str, int]]) -> bool:
        key = (batch.topic, batch.partition)
        if self.idempotent and self._partition_in_flight.get(key, 0) >= IN_FLIGHT_BATCHES_PER_PARTITION_MAX:
            return False
        if key in waiting:
            return False  # its partition already has a batch waiting to go
        try:
            leader = self.client.leader_for(batch.topic, batch.partition)
        except errors.TidewayError:
            return True  # sending finds out what to do without a leader
        return self._in_flight.get(leader, 0) < self.in_flight_per_broker_max

    async def _send_ready(self) -> None:
        by_leader: dict[int, list[OpenBatch]] = {}
        held: list[OpenBatch] = []
        while self._ready:
            batch = self._ready.popleft()
            resending = self._resending.get((batch.topic, batch.partition))
            if resending is not None:
                resending.append(batch)  # goes out with its partition's resend, in sequence order
                continue
            try:
                leader = self.client.leader_for(batch.topic, batch.partition)
            except errors.TidewayError:
                held.append(batch)
                continue
            by_leader.setdefault(leader, []).append(batch)
        if self.idempotent:
            by_leader = {leader: self._within_partition_cap(batches) for leader, batches in by_leader.items()}
        if held:
            if self.idempotent:
                for batch in held:
                    batch.attempts += 1
                self._resend_partitions(held)
            else:
                asyncio.get_running_loop().create_task(self._retry_later(held, None))
        for leader, batches in by_leader.items():
            if self._in_flight.get(leader, 0) >= self.in_flight_per_broker_max:
                self._ready.extendleft(reversed(batches))
                continue
            try:
                connection = await self.client.connection(leader)
            except errors.TidewayError as exc:
                self._fail_or_retry(batches, exc)
                self._refresh_metadata_soon()
                continue
            while batches:
                request_batches: list[OpenBatch] = []
                size = 0
                while batches and (not request_batches or size + len(batches[0].data) <= self.request_bytes_max):
                    batch = batches.pop(0)
                    request_batches.append(batch)
                    size += len(batch.data)
                self._send_request(leader, connection, request_batches)

    def _within_partition_cap(self, batches: list[OpenBatch]) -> list[OpenBatch]:
        """Keep at most IN_FLIGHT_BATCHES_PER_PARTITION_MAX unanswered batches per
        partition (the broker remembers that many for deduplication); hold the rest."""
        in_flight = dict(self._partition_in_flight)
        sendable, held = [], []
        for batch in batches:
            key = (batch.topic, batch.partition)
            if in_flight.get(key, 0) >= IN_FLIGHT_BATCHES_PER_PARTITION_MAX:
                held.append(batch)
            else:
                in_flight[key] = in_flight.get(key, 0) + 1
                sendable.append(batch)
        self._ready.extendleft(reversed(held))
        return sendable

    def _send_request(self, leader: int, connection, batches: list[OpenBatch]) -> None:
        request = m.ProduceRequest(
            acks=self.acks,
            timeout_ms=int(self.request_timeout_s * 1000),
            transactional_id=self._transactional_id,
            partitions=[m.ProducePartition(topic=b.topic, partition=b.partition, records=b.data) for b in batches],
        )
        for batch in batches:
            batch.attempts += 1
            self._mark_in_flight(batch, True)
        try:
            future = connection.send(ApiKey.PRODUCE, request, expect_response=self.acks != 0)
        except errors.TidewayError as exc:
            for batch in batches:
                self._mark_in_flight(batch, False)
            self._fail_or_retry(batches, exc)
            return
        if future is None:  # acks=0: nothing will come back
            for batch in batches:
                self._mark_in_flight(batch, False)
                self._complete(batch, -1)
            return
        self._in_flight[leader] = self._in_flight.get(leader, 0) + 1
        self._requests[future] = (leader, batches, time.monotonic())
        if self._stall_watch is None or self._stall_watch.done():
            self._stall_watch = asyncio.get_running_loop().create_task(self._watch_stalls())
        timeout = asyncio.get_running_loop().call_later(
            self.request_timeout_s + 5,
            lambda: future.done()
            or future.set_exception(errors.ClientTimeoutError("no answer to produce request")),
        )
        future.add_done_callback(lambda f: self._on_response(leader, batches, f, timeout))

    def _on_response(self, leader: int, batches: list[OpenBatch], future: asyncio.Future, timeout) -> None:
        timeout.cancel()
        self._requests.pop(future, None)
        self._in_flight[leader] -= 1
        for batch in batches:
            self._mark_in_flight(batch, False)
        exc = future.exception()
        if exc is not None:
            self._doubt(leader)
            self._wakeup.set()
            self._fail_or_retry(batches, exc)
            self._refresh_metadata_soon()
            return
        response: m.ProduceResponse = future.result()
        outcomes: list[tuple[OpenBatch, BaseException]] = []
        for batch, result in zip(batches, response.partitions, strict=False):
            if result.error_code == 0:
                self._complete(batch, result.base_offset)
            else:
                outcomes.append((batch, errors.error_for_code(result.error_code, result.error_message)))
        for batch in batches[len(response.partitions) :]:
            outcomes.append((batch, errors.UnknownServerError("the broker answered for fewer partitions than sent")))
        if outcomes:
            self._doubt(leader)
        else:
            # It answers and writes (a leader whose followers fell behind stalled for a while too; asked last
            # still, it left the stale leader the only broker to ask).
            self._doubted.pop(leader, None)
        for batch, error in outcomes:
            self._fail_or_retry([batch], error)
        # The sender after the records' callbacks (scheduled above): they are what a caller waits for.
        # Only when a batch waits for it (this answer freed a request's place) or one was retried: a
        # producer sending one record at a time wrote its batch from ``send`` (_send_at_once) and has
        # nothing else to send, and the wake-up took the publisher a loop turn for nothing, right when the
        # acknowledgement arrives, on the core the consumer's delivery needs.
        if self._open or self._ready or self._resending or outcomes:
            self._wakeup.set()

    async def _watch_stalls(self) -> None:
        """Give up on requests to a leader that stopped answering once another broker leads their partitions.

        A frozen broker (SIGSTOP, a long pause) keeps its connections open and answers nothing: waiting for the
        request timeout stalled its partitions for the whole freeze although the controller had moved their
        leadership within seconds (issue 40). While a request has gone unanswered for ``REQUEST_STALL_S``, the
        metadata is looked at again every ``STALL_CHECK_S``; a request whose batches are now led elsewhere fails
        as a timeout, so an idempotent producer resends them to the new leader (which recognises any it already
        has) and a plain one reports them as not known to be written. Runs while any request is out.
        """
        while self._requests:
            await asyncio.sleep(STALL_CHECK_S)
            now = time.monotonic()
            if not any(now - sent_at >= REQUEST_STALL_S for _l, _b, sent_at in self._requests.values()):
                continue
            for leader, _b, sent_at in self._requests.values():
                if now - sent_at >= REQUEST_STALL_S:
                    self._doubt(leader)
            try:
                await self.client.refresh_metadata(avoid=self._doubted_now())
            except errors.TidewayError as exc:
                log.debug("metadata refresh while a request is unanswered failed: %s", exc)
                continue
            for future, (leader, batches, sent_at) in list(self._requests.items()):
                if future.done() or now - sent_at < REQUEST_STALL_S or not any(
                        self._leader_or_none(batch) not in (leader, None) for batch in batches):
                    continue
                log.info("producer: broker %d has not answered for %.1f s and no longer leads what was sent to it: "
                         "sending again to the new leader", leader, time.monotonic() - sent_at)
                future.set_exception(errors.ClientTimeoutError(
                    f"broker {leader} did not answer within {time.monotonic() - sent_at:.1f} s and no longer leads "
                    f"the partitions of the request"))

    def _leader_or_none(self, batch: OpenBatch) -> int | None:
        try:
            return self.client.leader_for(batch.topic, batch.partition)
        except errors.TidewayError:
            return None

    def _mark_in_flight(self, batch: OpenBatch, in_flight: bool) -> None:
        if batch.in_flight == in_flight:
            return
        batch.in_flight = in_flight
        key = (batch.topic, batch.partition)
        count = self._partition_in_flight.get(key, 0) + (1 if in_flight else -1)
        if count:
            self._partition_in_flight[key] = count
        else:
            del self._partition_in_flight[key]

    def _doubt(self, leader: int) -> None:
        self._doubted[leader] = time.monotonic() + DOUBT_S

    def _doubted_now(self) -> set[int]:
        now = time.monotonic()
        for leader in [leader for leader, until in self._doubted.items() if until <= now]:
            del self._doubted[leader]
        return set(self._doubted)

    def _refresh_metadata_soon(self) -> None:
        """After a broken connection the leader may have moved: look again (once at a time)."""
        if self._metadata_refresh is None or self._metadata_refresh.done():
            self._metadata_refresh = asyncio.get_running_loop().create_task(self._refresh_metadata())

    async def _refresh_metadata(self) -> None:
        await asyncio.sleep(self.retry_backoff_s)
        try:
            await self.client.refresh_metadata(avoid=self._doubted_now())
        except errors.TidewayError as exc:
            log.debug("metadata refresh failed: %s", exc)

    def _may_retry(self, batch: OpenBatch, exc: BaseException) -> bool:
        """Every error marked retriable is retried (issue 40: an authentication the broker could not check for
        want of its controller failed batches for good although it said "retry"); a plain producer leaves out
        the ambiguous ones, after which the batch may be stored already."""
        if not getattr(exc, "retriable", False):
            return False
        if self.idempotent:
            return batch.attempts <= self.retries and not self._expired(batch)
        return not isinstance(exc, _AMBIGUOUS_ERRORS) and batch.attempts <= self.retries

    def _fail_or_retry(self, batches: list[OpenBatch], exc: BaseException) -> None:
        retriable = [b for b in batches if self._may_retry(b, exc)]
        for batch in batches:
            if batch not in retriable:
                self._fail(batch, exc)
                if self.idempotent:
                    self._abandon_sequence_after(batch, exc)
        if retriable:
            if self.idempotent:
                self._resend_partitions(retriable, exc)
            else:
                asyncio.get_running_loop().create_task(self._retry_later(retriable, exc))

    def _resend_partitions(self, batches: list[OpenBatch], cause: BaseException | None = None) -> None:
        """Idempotent: hand each batch to its partition's resend (started if needed)."""
        for batch in batches:
            batch.last_error = cause or batch.last_error
            key = (batch.topic, batch.partition)
            self._resending.setdefault(key, []).append(batch)
            if key not in self._resenders:
                self._resenders[key] = asyncio.get_running_loop().create_task(self._resend_partition(key))

    async def _resend_partition(self, key: tuple[str, int]) -> None:
        """Resend a partition's batches in sequence order once none of its batches is in flight."""
        try:
            await asyncio.sleep(self.retry_backoff_s)
            # Requests still out come back answered or into the resend list: wait for all of them.
            while self._partition_in_flight.get(key):
                await asyncio.sleep(0.01)
            try:
                await self.client.refresh_metadata(avoid=self._doubted_now())
            except errors.TidewayError as exc:
                log.debug("metadata refresh before a resend failed: %s", exc)
            else:
                if key[0] not in self.client.topics:
                    gone = errors.UnknownTopicOrPartitionError(f"topic {key[0]!r} does not exist")
                    for batch in self._resending.pop(key, []):
                        if not batch.future.done():
                            self._fail(batch, gone)
                            self._abandon_sequence_after(batch, gone)
                    return
        finally:
            self._resenders.pop(key, None)
        batches = sorted((b for b in self._resending.pop(key, []) if not b.future.done()),
                         key=lambda b: (b.builder.producer_id != self.producer_id, b.builder.base_sequence))
        for batch in batches:
            if batch.future.done():
                continue  # failed with an earlier one
            if batch.attempts > self.retries or self._expired(batch):
                cause = errors.RequestTimedOutError(
                    f"not acknowledged within the delivery timeout ({self.delivery_timeout_s:.0f}s) after "
                    f"{batch.attempts} attempts; last error: {batch.last_error or 'no leader known'}")
                self._fail(batch, cause)
                self._abandon_sequence_after(batch, cause)
        resend = [b for b in batches if not b.future.done()]
        self._ready.extendleft(reversed(resend))
        self._wakeup.set()

    def _fail_overdue(self, now: float) -> None:
        """Fail every batch past its delivery timeout that is not in a request: whatever held it back (a partition
        whose sends never resumed, a resend that never started), its sender must get an answer. A request's
        own timeout answers the batches in it."""
        for batch in [b for b in self._unfinished if not b.in_flight and self._expired(b, now)]:
            key = (batch.topic, batch.partition)
            is_open = self._open.get(key) is batch
            if is_open:
                del self._open[key]
            if batch in self._ready:
                self._ready.remove(batch)
            if batch in self._resending.get(key, ()):
                self._resending[key].remove(batch)
            log.warning("producer: a batch of %s-%d was %s past the delivery timeout (%.0f s, %d attempts): failing it",
                        batch.topic, batch.partition, "open" if is_open else "waiting to be sent", self.delivery_timeout_s,
                        batch.attempts)
            cause = errors.RequestTimedOutError(
                f"not acknowledged within the delivery timeout ({self.delivery_timeout_s:.0f}s) after {batch.attempts} "
                f"attempts; last error: {batch.last_error or 'it could not be sent'}")
            self._fail(batch, cause)
            if self.idempotent:
                self._abandon_sequence_after(batch, cause)

    def _expired(self, batch: OpenBatch, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) - batch.created_monotonic >= self.delivery_timeout_s

    def _abandon_sequence_after(self, failed: OpenBatch, exc: BaseException) -> None:
        """A batch failed for good: its partition's later batches can never follow it."""
        builder = failed.builder
        for batch in list(self._unfinished):
            other = batch.builder
            if (
                (batch.topic, batch.partition) == (failed.topic, failed.partition)
                and other.producer_id == builder.producer_id
                and other.base_sequence > builder.base_sequence
            ):
                self._fail(batch, errors.OutOfOrderSequenceError(f"an earlier batch of this partition failed: {exc}"))
        if builder.producer_id == self.producer_id:
            log.warning("producer %d: a batch failed for good (%s); continuing as a new producer", self.producer_id, exc)
            self._new_producer_id()

    async def _retry_later(self, batches: list[OpenBatch], cause: BaseException | None) -> None:
        await asyncio.sleep(self.retry_backoff_s)
        try:
            await self.client.refresh_metadata()
        except errors.TidewayError as exc:
            log.debug("metadata refresh before retry failed: %s", exc)
        else:
            for batch in batches:
                if batch.topic not in self.client.topics and not batch.future.done():
                    # The cluster no longer has the topic (deleted): retrying until the delivery timeout would
                    # only delay the answer.
                    self._fail(batch, errors.UnknownTopicOrPartitionError(f"topic {batch.topic!r} does not exist"))
                    if self.idempotent:
                        self._abandon_sequence_after(batch, errors.UnknownTopicOrPartitionError("topic deleted"))
        resend = []
        for batch in batches:
            if batch.future.done():
                continue
            if batch.attempts > self.retries or self._expired(batch):
                self._fail(batch, cause or errors.LeaderNotAvailableError("no leader known"))
                if self.idempotent:
                    self._abandon_sequence_after(batch, cause or errors.LeaderNotAvailableError("no leader known"))
            else:
                batch.attempts += 0 if cause is not None else 1
                resend.append(batch)
        # Resends go first and in sequence order, so a partition's batches stay in order.
        resend.sort(key=lambda b: (b.topic, b.partition, b.builder.base_sequence))
        self._ready.extendleft(reversed(resend))
        self._wakeup.set()

    def _complete(self, batch: OpenBatch, base_offset: int) -> None:
        self._finish(batch)
        if not batch.future.done():
            batch.future.set_result(base_offset)

    def _fail(self, batch: OpenBatch, exc: BaseException) -> None:
        self._finish(batch)
        if not batch.future.done():
            batch.future.set_exception(exc)
            # Mark retrieved: an unawaited failure is reported by the caller, not by asyncio.
            batch.future.exception()

    def _finish(self, batch: OpenBatch) -> None:
        if batch in self._unfinished:
            self._unfinished.discard(batch)
            self._buffered_bytes -= batch.builder.size_bytes
            if self._buffered_bytes < self.buffer_bytes_max:
                self._space.set()
