"""The replicas this broker holds, and the requests that read and write them.

Produce, fetch (with long polling), list offsets; waking what waits for new
records (long-polling fetches and followers at each append, queue receivers
through ``on_data`` when the HW moves); fsyncs shared between producers (group commit). Roles come from
``brokers.replication.Partition``; the broker decides them.

Ownership: the broker's event-loop thread, except the fsyncs handed to worker
threads (``Log.flush``), which only touch file descriptors and publish a
durable offset.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable

from tideway_server.brokers.replication import Partition, Role
from tideway_server.brokers.server.metadata_cache import MetadataCache
from tideway_server.brokers.server.metrics import BrokerMetrics
from tideway_server.brokers.storage import Log, LogManager

from tideway.aio import PromptFuture, resolve
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.errors import BrokerError, InvalidRequestError
from tideway.record.batch import (
    ATTRIBUTE_TRANSACTIONAL,
    BATCH_HEADER_BYTES,
    count_records,
    read_header,
)
from tideway.record.markers import delivered_records

__all__ = ["ReplicaManager"]

log = logging.getLogger(__name__)

FETCH_WAIT_MS_MAX = 30_000
FETCH_ANSWERS_MAX = 1_000  # answers of one streaming fetch; a larger answers_max is taken as this
FLUSH_IDLE_CHECK_S = 1.0  # with no topic flushing on an interval, the fsync check runs this often (not every 50 ms)
# Who may stream: a consumer, and a queue coordinator watching a remote leader. A follower asks
# again after each answer on purpose: its next fetch tells the leader what it holds (the HW).
_MAY_STREAM = frozenset({m.CONSUMER, m.QUEUE_READER})


class _FetchState:
    """A fetch's progress, moved on by its own loop and, while it is parked streaming, by ``wake`` (in place)."""

    __slots__ = ("request", "more", "deadline", "answers_left", "budget")

    def __init__(self, request: m.FetchRequest, more: Callable[[m.FetchResponse], bool] | None, deadline: float) -> None:
        self.request = request
        self.more = more
        self.deadline = deadline
        self.answers_left = min(request.answers_max, FETCH_ANSWERS_MAX) if more is not None else 1
        self.budget = request.max_bytes

    def may_stream(self, total_bytes: int) -> bool:
        """Whether an answer of ``total_bytes`` (records found after a wait) goes ahead, leaving the fetch open."""
        return self.answers_left > 1 and total_bytes > 0 and self.budget > total_bytes


_ATTRIBUTES_LOW_BYTE = 22  # the low byte of a batch's big-endian int16 attributes


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, metadata: MetadataCache, metrics: BrokerMetrics, *,
                 on_data: Callable[[str], None]) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self._metadata = metadata
        self.metrics = metrics
        self._on_data = on_data  # a topic's HW moved: the queue service wakes its receivers
        # A transaction's marker is on every in-sync replica of (topic, partition): (topic, partition, producer id,
        # committed) for the group coordinator, whose offsets in that transaction count from then (or are dropped).
        self.on_marker: Callable[[str, int, int, bool], None] = lambda topic, partition, producer_id, commit: None
        # (transactional id, producer id, epoch, partitions) -> why each may not take the producer's transactional
        # write: the transaction coordinator's check (KIP-890), set by the broker.
        self.verify_transaction: Callable[[str, int, int, list[tuple[str, int]]], Awaitable[dict]] | None = None
        # Transactional writes waiting for their turn: (topic, partition, producer id) -> the latest request's
        # turn, done once it appended (see _transactional_turn).
        self._turns: dict[tuple[str, int, int], asyncio.Future] = {}
        self._verifying: dict[tuple[str, int, int, int], asyncio.Future] = {}  # checks in progress, shared by requests
        self.partitions: dict[tuple[str, int], Partition] = {}
        # Long-polling fetches waiting for data, per partition.
        self._data_waiters: dict[tuple[str, int], set[PromptFuture]] = defaultdict(set)
        # Waiters of fetches woken by new data, not resumed yet (a produce resumes them before it answers).
        self._woken_fetches: list[PromptFuture] = []
        # The parked fetches that may stream (by their waiter): wake answers them where they are.
        self._streams: dict[PromptFuture, _FetchState] = {}
        # The fsync in progress per log, shared by every produce waiting on it (group commit).
        self._flushes: dict[Log, asyncio.Future] = {}

    async def stop(self) -> None:
        """Wait for fsyncs in flight."""
        for flush in list(self._flushes.values()):
            await asyncio.gather(flush, return_exceptions=True)

    def remove_topic(self, name: str) -> None:
        """Drop the replicas of a deleted topic (their logs are deleted by the LogManager)."""
        self.metrics.traffic.forget(name)
        for key in [key for key in self.partitions if key[0] == name]:
            partition = self.partitions.pop(key)
            partition.become_follower(leader_id=-1, leader_epoch=partition.leader_epoch,
                                      partition_epoch=partition.partition_epoch, replicas=[], isr=[])

    def add_partition(self, log_: Log) -> Partition:
        partition = Partition(self.broker_id, log_, on_high_watermark=self._on_high_watermark)
        self.partitions[(log_.topic, log_.partition)] = partition
        return partition

    def _on_high_watermark(self, partition: Partition) -> None:
        # Queue receivers read committed records only: an append wakes them when the HW passes it,
        # not before (with acks=all, waking them at the append too found nothing, every message).
        self.wake(partition.topic, partition.partition)
        self._on_data(partition.topic)

    def partition(self, topic: str, partition: int) -> Partition:
        """The local replica of ``topic``-``partition``; NotLeaderError or UnknownTopicOrPartitionError if none."""
        found = self.partitions.get((topic, partition))
        if found is not None:
            return found
        if (topic, partition) in self._metadata.partitions:
            leader = self._metadata.partitions[(topic, partition)].leader
            raise errors.NotLeaderError(f"broker {self.broker_id} holds no replica of {topic}-{partition} (leader: {leader})")
        self.logs.get_log(topic, partition)  # raises the precise unknown-topic error
        raise errors.UnknownTopicOrPartitionError(f"{topic}-{partition} is not on this broker")

    async def flush_due(self) -> float:
        """fsync the logs whose flush interval passed (topics with ``flush: MS``).

        Returns the seconds until one may be due (at most FLUSH_IDLE_CHECK_S: a topic whose flush
        setting changes to an interval is looked at within that time).
        """
        now = time.monotonic()
        next_due = FLUSH_IDLE_CHECK_S
        for log_ in list(self.logs.logs.values()):
            interval_ms = log_.config.flush_interval_ms
            if interval_ms <= 0:
                continue
            due_in = log_.last_flush_monotonic + interval_ms / 1000 - now
            if due_in <= 0 and log_.log_end_offset > log_.flushed_offset:
                await self._flush(log_)
                due_in = interval_ms / 1000
            next_due = min(next_due, due_in)
        return next_due

    async def produce(self, request: m.ProduceRequest) -> m.ProduceResponse | None:
        if request.acks not in (0, 1, m.ACKS_ALL):
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or -1 (all), got {request.acks}")
        opening = self._first_transactional_writes(request)
        turn = None
        if opening or self._turns:
            turn = await self._transactional_turn(request, opening)
            if turn is not None:
                opening = self._first_transactional_writes(request)  # the writes before it may have opened it
        try:
            refused = await self._verify_transactional(request, opening) if opening else {}
            results, durable_waits, commit_waits = self._append_produced(request, refused)
        finally:
            self._end_turn(turn)
        # Deliveries before the acknowledgement: the fetches this append woke are answered now, in this
        # call (as Kafka's purgatory completes delayed fetches in the produce that satisfied them), so
        # consumers get the records first. Each write wakes its reader, which on a busy machine takes the
        # writer's core for a while: answering the producer first put that wake-up on the path of every
        # delivery (end-to-end p50 0.43 -> 0.35 ms, p99 1.2 -> 0.82 ms; docs/benchmarks.md).
        left_to_their_turn = self.resume_woken()
        for log_, last_offset in durable_waits:
            await self._until_durable(log_, last_offset)
        if commit_waits:
            await self._until_committed(commit_waits, request.timeout_ms)
        if request.acks == 0:
            return None
        if left_to_their_turn and not durable_waits and not commit_waits:
            await asyncio.sleep(0)  # fetches run by plain tasks (after a large frame): after their turn
        return m.ProduceResponse(partitions=results)

    def _append_produced(self, request: m.ProduceRequest, refused: dict) -> tuple[list, list, list]:
        """Append every partition of the request (before any await: see connection.py on ordering); the results,
        and what acknowledging them waits for (fsyncs, the ISR)."""
        results: list[m.ProducePartitionResult] = []
        durable_waits: list[tuple[Log, int]] = []
        commit_waits: list[tuple[m.ProducePartitionResult, asyncio.Future]] = []
        for part in request.partitions:
            result = m.ProducePartitionResult(topic=part.topic, partition=part.partition)
            try:
                if refused:
                    refusal = refused.get((part.topic, part.partition))
                    if refusal is not None:
                        raise refusal
                partition = self.partition(part.topic, part.partition)
                appended, committed = partition.append_as_leader(bytearray(part.records), acks=request.acks)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            except OSError as exc:
                log.error("disk write failed for %s-%d: %s", part.topic, part.partition, exc)
                result.error_code = errors.StorageError.errno
                result.error_message = f"disk write failed: {exc}"
            else:
                log_ = partition.log
                result.base_offset = appended.base_offset
                result.log_start_offset = log_.log_start_offset
                self.metrics.traffic.add_in(part.topic, appended.record_count, appended.size_bytes)
                if log_.high_watermark <= appended.last_offset:
                    # Followers (and consumers once the HW moves): an append the HW covers already woke
                    # every fetch of the partition as the HW moved.
                    self.wake(part.topic, part.partition)
                if log_.config.flush_interval_ms == 0:
                    durable_waits.append((log_, appended.last_offset))
                if committed is not None:
                    commit_waits.append((result, committed))
            results.append(result)
        return results, durable_waits, commit_waits

    async def _transactional_turn(self, request: m.ProduceRequest, opening) -> tuple | None:
        """Keep a producer's transactional writes to a partition in the order they came while one of them waits
        for its check (KIP-890): a request that opens a transaction, and every later one of the same producers
        and partitions, appends after the requests before it (their checks run concurrently, and end in any
        order). Returns this request's turn (end it with _end_turn once appended), or None when it needs none."""
        keys = {(t, p, pid) for t, p, pid, _epoch in self._transactional_writes(request)}
        waiting_for = {self._turns[key] for key in keys if key in self._turns}
        if not opening and not waiting_for:
            return None
        mine = asyncio.get_running_loop().create_future()
        for key in keys:
            self._turns[key] = mine
        if waiting_for:
            try:
                await asyncio.wait(waiting_for)
            except BaseException:
                self._end_turn((keys, mine))
                raise
        return keys, mine

    def _end_turn(self, turn: tuple | None) -> None:
        if turn is None:
            return
        keys, mine = turn
        if not mine.done():
            mine.set_result(None)
        for key in keys:
            if self._turns.get(key) is mine:
                del self._turns[key]

    @staticmethod
    def _transactional_writes(request: m.ProduceRequest) -> list[tuple[str, int, int, int]]:
        """(topic, partition, producer id, epoch) of the request's transactional writes."""
        out = []
        for part in request.partitions:
            records = part.records
            if len(records) >= BATCH_HEADER_BYTES and records[_ATTRIBUTES_LOW_BYTE] & ATTRIBUTE_TRANSACTIONAL:
                header = read_header(records)
                out.append((part.topic, part.partition, header.producer_id, header.producer_epoch))
        return out

    def _first_transactional_writes(self, request: m.ProduceRequest) -> list[tuple[str, int, int, int]]:
        """(topic, partition, producer id, epoch) of the request's transactional writes that would open a
        transaction in their partition (their producer has none open there yet): those are checked first."""
        out = []
        for topic, partition, producer_id, epoch in self._transactional_writes(request):
            found = self.partitions.get((topic, partition))
            if found is not None and producer_id not in found.log.transactions.ongoing:
                out.append((topic, partition, producer_id, epoch))
        return out

    async def _verify_transactional(self, request: m.ProduceRequest,
                                    writes: list[tuple[str, int, int, int]]) -> dict[tuple[str, int], BrokerError]:
        """Why each partition may not take its first transactional write (KIP-890): not added to the producer's
        open transaction, or no transaction to ask about. Requests that arrive meanwhile for the same partition
        and producer wait on the same check, then append in the order they came."""
        if not request.transactional_id or self.verify_transaction is None:
            refusal = errors.InvalidTxnStateError("a transactional write names no transactional id")
            return {(t, p): refusal for t, p, _pid, _epoch in writes}
        waits = []
        for topic, partition, producer_id, epoch in writes:
            key = (topic, partition, producer_id, epoch)  # (a fenced instance's check answers for it alone)
            check = self._verifying.get(key)
            if check is None:
                check = asyncio.ensure_future(self.verify_transaction(
                    request.transactional_id, producer_id, epoch, [(topic, partition)]))
                self._verifying[key] = check
                check.add_done_callback(lambda _done, key=key: self._verifying.pop(key, None))
            waits.append(check)
        refused: dict[tuple[str, int], BrokerError] = {}
        for answer in await asyncio.gather(*waits):
            refused.update(answer)
        for (topic, partition), refusal in refused.items():
            log.debug("%s-%d: a transactional write of %s refused: %s", topic, partition, request.transactional_id,
                     refusal)
        return refused

    async def _until_committed(self, waits: list[tuple[object, asyncio.Future]], timeout_ms: int) -> None:
        """acks=all (and markers, deleted records): wait until every ISR member has it, or say in each result why
        not."""
        futures = [future for _, future in waits]
        await asyncio.wait(futures, timeout=max(timeout_ms, 0) / 1000)
        for result, future in waits:
            if not future.done():
                future.cancel()
                result.error_code = errors.RequestTimedOutError.errno
                result.error_message = f"not replicated to every in-sync replica within {timeout_ms} ms"
            elif future.exception() is not None:
                exc = future.exception()
                result.error_code = getattr(exc, "errno", errors.UnknownServerError.errno)
                result.error_message = str(getattr(exc, "message", exc))

    async def _until_durable(self, log_: Log, offset: int) -> None:
        """Wait until ``offset`` is fsynced, sharing fsyncs between producers (group commit).

        A producer whose records were appended while an fsync ran waits for it,
        then for the next one, which covers every batch appended meanwhile.
        """
        while log_.flushed_offset <= offset:
            await asyncio.shield(self._flush(log_))

    def _flush(self, log_: Log) -> asyncio.Future:
        """The fsync of ``log_`` in flight, or a new one.

        A finished fsync is never handed out again: its done-callbacks (which
        forget it) run only on a later turn of the loop, and awaiting a done
        future does not yield, so a waiter that got it back would spin forever
        without letting them run (issue 15: a `flush: always` broker locked up).
        """
        flush = self._flushes.get(log_)
        if flush is None or flush.done():
            flush = asyncio.ensure_future(asyncio.to_thread(log_.flush))
            self._flushes[log_] = flush
            flush.add_done_callback(functools.partial(self._forget_flush, log_))
        return flush

    def _forget_flush(self, log_: Log, done: asyncio.Future) -> None:
        if self._flushes.get(log_) is done:  # a newer fsync may have taken its place already
            del self._flushes[log_]

    def wake(self, topic: str, partition: int) -> None:
        """New records or a higher HW in ``topic``-``partition``: wake long-polling fetches.

        A parked streaming fetch is answered right here instead, as its own loop would (the same read,
        the same conditions) and stays parked: no resumption of its coroutine, no new waiter and timer,
        and the delivery is written before the produce that woke it goes on (end-to-end latency). One
        that would give its last answer (or fails) is woken to give it itself.
        """
        key = (topic, partition)
        waiters = self._data_waiters.pop(key, None)
        if not waiters:
            return
        woken = self._woken_fetches
        resume_later = not woken  # woken outside a produce (a follower's fetch moved the HW): on the next turn
        for waiter in waiters:
            if waiter.done():
                continue
            stream = self._streams.get(waiter)
            if stream is not None and self._answer_in_place(stream):
                self._data_waiters[key].add(waiter)  # still parked here
                continue
            waiter.set_result(None)
            woken.append(waiter)
        if resume_later and woken:
            asyncio.get_running_loop().call_soon(self.resume_woken)

    def _answer_in_place(self, state: _FetchState) -> bool:
        """One turn of a parked streaming fetch's loop (see ``fetch``); False if the fetch must run it itself."""
        request = state.request
        try:
            results, total_bytes, any_error = self._read_partitions(request, state.budget)
            if any_error or time.monotonic() >= state.deadline:
                return False  # its final answer
            if total_bytes < request.min_bytes:
                return True  # not enough yet (for a consumer: nothing it may see): parked as it was
            if not state.may_stream(total_bytes):
                return False  # its final answer
            self._stream_answer(state, results, total_bytes)
        except Exception:  # noqa: BLE001 - the fetch meets it again in its own loop, where the router answers it
            log.debug("answering a parked fetch in place failed; waking it", exc_info=True)
            return False
        return True

    def _stream_answer(self, state: _FetchState, results: list[m.FetchPartitionResult], total_bytes: int) -> None:
        """Answer ahead (``more``) and go on from the offsets after this answer's records.

        Metered after the write (off the delivery's way); an answer whose connection is closing (its
        fetch is being cancelled) is neither written nor metered.
        """
        more = state.more
        if more is None or not more(m.FetchResponse(partitions=results, more=True)):
            return
        request = state.request
        state.answers_left -= 1
        state.budget -= total_bytes
        for part, result in zip(request.partitions, results, strict=True):
            if result.records:
                part.fetch_offset = self._served(request, result)

    def resume_woken(self) -> bool:
        """Answer the fetches woken since the last call, now; True if some are left to their task's next turn."""
        left = False
        while self._woken_fetches:
            woken, self._woken_fetches = self._woken_fetches, []
            for waiter in woken:
                if not waiter.resume():
                    left = True
        return left

    # -- fetch ---------------------------------------------------------------------------------

    async def fetch(self, request: m.FetchRequest, more: Callable[[m.FetchResponse], bool] | None = None) -> m.FetchResponse:
        """Records from each partition's offset; waits up to ``max_wait_ms`` for ``min_bytes`` of them.

        A consumer's (or a queue coordinator's) fetch with ``answers_max`` > 1 that had to wait streams: each time records arrive
        it answers through ``more`` (``more=True``) and waits again from where that answer ended, so a
        consumer that keeps up is never between fetches when a message comes (a message that came then
        waited for the consumer's next request: the end-to-end p99). It ends, with the answer this
        returns, at ``max_wait_ms`` from its start, on its last allowed answer, once its answers hold
        ``max_bytes``, or on a partition's error. A fetch that finds records at once answers once: a
        consumer catching up asks again as before.
        """
        if request.max_bytes <= 0 or any(p.partition_max_bytes <= 0 for p in request.partitions):
            raise errors.InvalidFetchSizeError("max_bytes and partition_max_bytes must be positive")
        if request.answers_max < 1:
            raise InvalidRequestError(f"answers_max must be at least 1, got {request.answers_max}")
        if request.answers_max > 1 and request.replica_id not in _MAY_STREAM:
            raise InvalidRequestError("only a consumer's or a queue reader's fetch may answer more than once (answers_max)")
        wait_ms = min(max(request.max_wait_ms, 0), FETCH_WAIT_MS_MAX)
        deadline = time.monotonic() + wait_ms / 1000
        loop = asyncio.get_running_loop()
        if request.replica_id >= 0:
            early = self._check_replica_fetch(request)
            if early is not None:
                return m.FetchResponse(partitions=early)
        state = _FetchState(request, more, deadline)
        waited = False
        while True:
            results, total_bytes, any_error = self._read_partitions(request, state.budget)
            remaining = deadline - time.monotonic()
            if total_bytes >= request.min_bytes or any_error or remaining <= 0:
                if not (waited and not any_error and remaining > 0 and state.may_stream(total_bytes)):
                    break
                # Streaming: answer now and wait again, from the offsets after this answer's records.
                self._stream_answer(state, results, total_bytes)
            waiter = PromptFuture(loop=loop)
            keys = [(p.topic, p.partition) for p in request.partitions]
            for key in keys:
                self._data_waiters[key].add(waiter)
            if state.answers_left > 1:  # it may stream: wake answers it where it is
                self._streams[waiter] = state
            # A timer that resolves the waiter, not asyncio.wait_for: the fetch resumes on the loop
            # iteration after the append that woke it (end-to-end latency).
            timer = loop.call_later(deadline - time.monotonic(), resolve, waiter)
            try:
                await waiter
            finally:
                timer.cancel()
                self._streams.pop(waiter, None)
                for key in keys:
                    waiters = self._data_waiters.get(key)
                    if waiters is not None:
                        waiters.discard(waiter)
                        if not waiters:
                            del self._data_waiters[key]
            waited = True
        self._meter(request, results)
        return m.FetchResponse(partitions=results)

    def _meter(self, request: m.FetchRequest, results: list[m.FetchPartitionResult]) -> None:
        """Count what a consumer's fetch serves; replication, a queue coordinator's or a service's read is not consumption."""
        if request.replica_id != m.CONSUMER:
            return
        for result in results:
            if result.records:
                self._served(request, result)

    def _served(self, request: m.FetchRequest, result: m.FetchPartitionResult) -> int:
        """Meter the records of ``result`` if a consumer's fetch serves them; the offset after them.

        One walk over the batch headers gives both (a streamed answer needs both, every delivery).
        """
        records, next_offset = count_records(result.records)
        if request.replica_id == m.CONSUMER:
            if result.aborted_transactions:  # (read_committed) what the reader drops was not delivered
                records = delivered_records(result.records, result.aborted_transactions)
            self.metrics.traffic.add_out(result.topic, records, len(result.records))
        return next_offset

    def _read_partitions(self, request: m.FetchRequest, budget: int) -> tuple[list[m.FetchPartitionResult], int, bool]:
        results = []
        total = 0
        any_error = False
        for part in request.partitions:
            result = m.FetchPartitionResult(topic=part.topic, partition=part.partition)
            try:
                partition = self.partition(part.topic, part.partition)
                if partition.role is not Role.LEADER:
                    raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {part.topic}-{part.partition}")
                log_ = partition.log
                # Followers copy everything the leader has; consumers see committed records only, and in
                # READ_COMMITTED none of a transaction still open (up to the last stable offset).
                committed = request.isolation_level == m.READ_COMMITTED and request.replica_id < 0
                if request.replica_id >= 0:
                    limit = log_.log_end_offset
                else:
                    limit = log_.last_stable_offset if committed else log_.high_watermark
                    result.last_stable_offset = log_.last_stable_offset
                if budget > 0:
                    read = log_.read(part.fetch_offset, min(part.partition_max_bytes, budget), max_offset=limit)
                    result.records = read.records
                    if committed and read.records and log_.transactions.aborted:
                        result.aborted_transactions = [(txn.producer_id, txn.first_offset)
                                                       for txn in log_.aborted_between(part.fetch_offset, limit)]
                else:
                    # Out of budget: report offsets only.
                    read = log_.read(part.fetch_offset, 1, max_offset=part.fetch_offset)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
                any_error = True
            else:
                result.high_watermark = read.high_watermark
                result.log_start_offset = read.log_start_offset
                result.log_end_offset = read.log_end_offset
                budget -= len(result.records)
                total += len(result.records)
            results.append(result)
        return results, total, any_error

    def _check_replica_fetch(self, request: m.FetchRequest) -> list[m.FetchPartitionResult] | None:
        """Record what each follower holds; answer at once on errors or divergence."""
        early = []
        for part in request.partitions:
            result = m.FetchPartitionResult(topic=part.topic, partition=part.partition)
            try:
                partition = self.partition(part.topic, part.partition)
                partition.check_follower_fetch(request.replica_id, part.current_leader_epoch)
                diverging = partition.diverging_epoch(part.last_fetched_epoch, part.fetch_offset)
                if diverging is None:
                    partition.record_follower_fetch(request.replica_id, part.fetch_offset, part.log_start_offset)
                    continue
                result.diverging_epoch, result.diverging_end_offset = diverging
                result.high_watermark = partition.log.high_watermark
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            early.append(result)
        if not early:
            return None
        # Answer for every partition now; the ones that were fine get no records
        # this round and are asked for again at once.
        answered = {(r.topic, r.partition) for r in early}
        for part in request.partitions:
            if (part.topic, part.partition) not in answered:
                partition = self.partitions[(part.topic, part.partition)]
                early.append(m.FetchPartitionResult(topic=part.topic, partition=part.partition, high_watermark=partition.log.high_watermark))
        return early

    async def offset_for_leader_epoch(self, request: m.OffsetForLeaderEpochRequest) -> m.OffsetForLeaderEpochResponse:
        """Where each asked epoch ends on the leader: a consumer whose position lies past it after a leader change
        knows its log was truncated (Kafka's OffsetForLeaderEpoch, from the same epoch cache followers use)."""
        results = []
        for query in request.partitions:
            result = m.EpochEnd(topic=query.topic, partition=query.partition)
            try:
                partition = self.partition(query.topic, query.partition)
                partition.check_leader_epoch(query.current_leader_epoch)
                result.leader_epoch, result.end_offset = partition.log.epochs.end_offset_for(
                    query.leader_epoch, partition.log.log_end_offset)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        return m.OffsetForLeaderEpochResponse(partitions=results)

    async def write_txn_markers(self, request: m.WriteTxnMarkersRequest) -> m.WriteTxnMarkersResponse:
        """End transactions in the partitions this broker leads (from a transaction coordinator): each marker is
        appended, and answered once every in-sync replica has it (as acks=all)."""
        results = []
        waits: list[tuple[m.TxnMarkerResult, asyncio.Future]] = []
        for marker in request.markers:
            for ref in marker.partitions:
                result = m.TxnMarkerResult(producer_id=marker.producer_id, topic=ref.topic, partition=ref.partition)
                try:
                    partition = self.partition(ref.topic, ref.partition)
                    waits.append((result, partition.append_marker(
                        marker.producer_id, marker.producer_epoch, commit=marker.commit,
                        coordinator_epoch=marker.coordinator_epoch)))
                    self.wake(ref.topic, ref.partition)
                except BrokerError as exc:
                    result.error_code, result.error_message = exc.errno, exc.message
                except OSError as exc:
                    log.error("writing a marker to %s-%d failed: %s", ref.topic, ref.partition, exc)
                    result.error_code, result.error_message = errors.StorageError.errno, f"disk write failed: {exc}"
                results.append(result)
        self.resume_woken()
        if waits:
            await self._until_committed(waits, request.timeout_ms)
        commits = {marker.producer_id: marker.commit for marker in request.markers}
        for result, _ in waits:
            if not result.error_code:
                self.on_marker(result.topic, result.partition, result.producer_id, commits[result.producer_id])
        return m.WriteTxnMarkersResponse(results=results)

    async def delete_records(self, request: m.DeleteRecordsRequest) -> m.DeleteRecordsResponse:
        """Delete each partition's records below its offset (Kafka's DeleteRecords; a queue's purge), and answer
        once every in-sync replica has deleted them too (or say it did not within ``timeout_ms``)."""
        results = []
        waits: list[tuple[m.DeleteRecordsPartitionResult, asyncio.Future]] = []
        for part in request.partitions:
            result = m.DeleteRecordsPartitionResult(topic=part.topic, partition=part.partition)
            try:
                if part.offset < -1:
                    raise errors.OffsetOutOfRangeError(f"offset {part.offset} is neither -1 (all) nor an offset")
                partition = self.partition(part.topic, part.partition)
                result.low_watermark, replicated = partition.delete_records(part.offset)
                waits.append((result, replicated))
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            except OSError as exc:
                log.error("deleting records of %s-%d failed: %s", part.topic, part.partition, exc)
                result.error_code, result.error_message = errors.StorageError.errno, f"disk write failed: {exc}"
            results.append(result)
        if waits:  # (a timeout: deleted here, not yet on every replica; deleting again is harmless)
            await self._until_committed(waits, request.timeout_ms)
        return m.DeleteRecordsResponse(partitions=results)

    async def list_offsets(self, request: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
        results = []
        for part in request.partitions:
            result = m.ListOffsetsPartitionResult(topic=part.topic, partition=part.partition)
            try:
                partition = self.partition(part.topic, part.partition)
                if partition.role is not Role.LEADER:
                    raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {part.topic}-{part.partition}")
                log_ = partition.log
                if part.timestamp == m.LATEST_TIMESTAMP:
                    committed = request.isolation_level == m.READ_COMMITTED
                    result.offset = log_.last_stable_offset if committed else log_.high_watermark
                elif part.timestamp == m.EARLIEST_TIMESTAMP:
                    result.offset = log_.log_start_offset
                elif part.timestamp < 0:
                    raise InvalidRequestError(f"timestamp {part.timestamp} is neither -1, -2 nor a time")
                else:
                    result.offset, result.timestamp = log_.offset_for_timestamp(part.timestamp)
            except BrokerError as exc:
                result.error_code, result.error_message = exc.errno, exc.message
            results.append(result)
        return m.ListOffsetsResponse(partitions=results)
