"""Queue consumers (shared consumption with per-message acks) and dead-letter tools.

    async with QueueConsumer("127.0.0.1:9401", "workers", "jobs") as queue:
        for message in await queue.receive(max_messages=10, wait_ms=20_000):
            try:
                handle(message.value)
            except Exception as exc:
                await queue.nack([message], error=str(exc))   # redelivered after a backoff
            else:
                await queue.ack([message])

Acknowledgements made in the same event-loop turn (handlers of a batch
finishing together, each acking its own message) travel in one request, and
a request does not wait for the one before: ``await queue.ack([message])``
per message costs about what one ``ack`` of the whole batch does. Accepts
travel as ranges of consecutive offsets. Each call
still answers only once the broker has stored its acknowledgements, and
raises for its own messages only.

A message is locked for the visibility timeout (the queue's, or ``lock_ms``)
from the moment it is received; ``extend`` moves the lock. A receipt
(``Message.receipt``) names one delivery: once the lock has expired and the
message went to another worker, acknowledging with the old receipt fails
with INVALID_RECORD_STATE.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import aclosing

import msgspec

from tideway.native.client import TidewayClient
from tideway.native.consumer import Consumer
from tideway.native.group import CoordinatorLink, commit_offsets, fetch_committed
from tideway.native.producer import Producer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.headers import DEADLINE_HEADER, DLQ_HEADERS, REDRIVEN_HEADER
from tideway.protocol.messages import ApiKey
from tideway.protocol.names import split_tenant_prefix

__all__ = ["DEADLINE_HEADER", "Message", "QueueConsumer", "list_dead_letters", "parse_receipt", "purge_dead_letters", "redrive"]

log = logging.getLogger(__name__)


class Message(msgspec.Struct, frozen=True, gc=False):
    """One delivery. A Struct, not a dataclass: a gateway makes tens of thousands a second (``gc=False``:
    it holds no cycle, so the garbage collector need not track it)."""

    topic: str
    partition: int
    offset: int
    delivery_count: int
    lock_deadline_ms: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]

    @property
    def receipt(self) -> str:
        """The receipt, "partition:offset:delivery": it names this delivery to ``ack``, ``nack`` and the gateway.
        Made when asked for: a worker that acknowledges its ``Message`` objects never needs it."""
        return f"{self.partition}:{self.offset}:{self.delivery_count}"


def parse_receipt(receipt: str) -> tuple[int, int, int]:
    """'partition:offset:delivery' -> (partition, offset, delivery count)."""
    try:
        partition, offset, count = (int(part) for part in receipt.split(":"))
    except (ValueError, AttributeError):
        raise errors.InvalidRequestError(f"receipt {receipt!r} is not partition:offset:delivery") from None
    if not (0 <= partition < 2**31 and 0 <= offset < 2**63 and 0 < count < 2**31):
        raise errors.InvalidRequestError(f"receipt {receipt!r} names no partition, offset and delivery that can exist")
    return partition, offset, count


# A message, its receipt, or its receipt parsed.
Receipt = Message | str | tuple[int, int, int]

# Acknowledgements of one request at most (a request's size stays well under the frame limit).
MAX_ACKS_PER_REQUEST = 5_000


class QueueConsumer:
    """A queue group's consumer: receive, then acknowledge by message or receipt.

    ``ack_linger_ms``: how long accepts (``ack``) wait to share a request (0, the default: until the
    end of the loop turn they were made in; releases, rejects and extensions never wait longer; one
    ``ack`` may ask for less with ``linger_ms``, and takes the accepts lingering then with it). A
    process acknowledging for many slow-paced clients (the gateway, for WebSocket subscribers acking a
    message or two at a time) saves a request and a replicated state write for each acknowledgement
    it merges, for that much delay on the answers.
    """

    def __init__(self, client: TidewayClient | str, group_id: str, topic: str, *, member_id: str = "",
                 api_key: str | None = None, ack_linger_ms: float = 0) -> None:
        self._own_client = isinstance(client, str)
        self.client = TidewayClient(client, api_key=api_key) if isinstance(client, str) else client
        self.group_id = group_id
        self.topic = topic
        self.member_id = member_id
        self.link = CoordinatorLink(self.client, group_id, group_type="queue")
        # Acknowledgements waiting for the end of this loop turn, and the requests on their way.
        self._unsent: list[tuple[list, str | None, asyncio.Future]] = []
        self._send_scheduled = False
        self._turn_loop: asyncio.AbstractEventLoop | None = None
        self._sending: set[asyncio.Task] = set()
        self.ack_linger_s = ack_linger_ms / 1000
        self._linger: asyncio.TimerHandle | None = None

    async def start(self) -> None:
        if self._own_client:
            await self.client.start()

    async def stop(self) -> None:
        if self._linger is not None and self._unsent:  # lingering acknowledgements go now
            self._linger.cancel()
            self._send_unsent()
        while self._unsent or self._sending:  # acknowledgements already made still reach the broker
            await asyncio.gather(*self._sending, return_exceptions=True) if self._sending else await asyncio.sleep(0)
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> QueueConsumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    async def receive(self, max_messages: int = 10, *, wait_ms: int = 0, lock_ms: int = 0) -> list[Message]:
        """Lock and return up to ``max_messages``; wait up to ``wait_ms`` for the first one (long polling)."""
        request = m.ShareAcquireRequest(
            group_id=self.group_id, topic=self.topic, max_records=max_messages, max_wait_ms=wait_ms, lock_ms=lock_ms, member_id=self.member_id
        )
        response: m.ShareAcquireResponse = await self.link.request(
            ApiKey.SHARE_ACQUIRE, request, timeout_s=self.client.read_timeout_s(wait_ms / 1000), wait_s=wait_ms / 1000)
        topic = self.topic
        return [
            Message(topic, r.partition, r.offset, r.delivery_count, r.lock_deadline_ms, r.timestamp_ms, r.key, r.value, r.headers)
            for r in response.records
        ]

    def ack(self, messages: list[Receipt], *, linger_ms: float | None = None) -> asyncio.Future:
        """Accept: the messages are done. Await it: it answers (None) once the broker has stored the acceptance.

        ``linger_ms``: how long this accept may wait to share a request (default ``ack_linger_ms``).
        """
        return self._queue(self._receipts(messages), None, linger_ms=linger_ms)

    def nack(self, messages: list[Receipt], *, delay_ms: int | None = None, error: str = "") -> asyncio.Future:
        """Release for redelivery after ``delay_ms`` (default: the queue's backoff); dead-lettered at the delivery limit."""
        return self._acknowledge(messages, "release", delay_ms=-1 if delay_ms is None else delay_ms, error=error)

    def reject(self, messages: list[Receipt], *, error: str = "") -> asyncio.Future:
        """Send straight to the dead-letter topic."""
        return self._acknowledge(messages, "reject", error=error)

    async def extend(self, messages: list[Receipt], lock_ms: int) -> list[int]:
        """Hold the locks ``lock_ms`` more from now (up to 12 h); returns the new deadlines (ms)."""
        results = await self._acknowledge(messages, "extend", lock_ms=lock_ms)
        return [r.lock_deadline_ms for r in results]

    @staticmethod
    def _receipts(messages: list[Receipt]) -> list[tuple[int, int, int]]:
        receipts = []
        for message in messages:
            if isinstance(message, Message):
                receipts.append((message.partition, message.offset, message.delivery_count))
            elif isinstance(message, tuple):
                receipts.append(message)
            else:
                receipts.append(parse_receipt(message))
        return receipts

    def _acknowledge(self, messages: list[Receipt], action: str, **fields) -> asyncio.Future:
        acks = [m.ShareAck(partition=partition, offset=offset, delivery_count=count, action=action, **fields)
                for partition, offset, count in self._receipts(messages)]
        return self._queue(acks, action)

    def _queue(self, items: list, action: str | None, *, linger_ms: float | None = None) -> asyncio.Future:
        """Queue acknowledgements for this loop turn's request; the future gets their answer or their error.

        ``items`` are receipts to accept (``action`` None: sent as ranges of
        offsets) or ``ShareAck``s. A plain future, not a coroutine:
        acknowledging each message of a batch and awaiting them together
        (``asyncio.gather``) makes no task per message.
        """
        if self._send_scheduled:
            # The loop of this turn's first acknowledgement: asking for the running loop again costs
            # a system call each time on Python 3.11 (it checks the process id).
            loop = self._turn_loop
        else:
            loop = self._turn_loop = asyncio.get_running_loop()
        answered = loop.create_future()
        if not items:
            answered.set_result([] if action else None)
            return answered
        self._unsent.append((items, action, answered))
        # Only accepts linger: a release or reject is meant to take effect now (a redelivery, a dead letter).
        if action is not None:
            wait_s = 0.0
        else:
            wait_s = self.ack_linger_s if linger_ms is None else linger_ms / 1000
        if not self._send_scheduled:
            self._send_scheduled = True
            self._schedule_send(loop, wait_s)
        elif self._linger is not None and loop.time() + wait_s < self._linger.when():
            # Due before the accepts lingering now (a release, or an accept that may wait less): it takes
            # them with it.
            self._linger.cancel()
            self._schedule_send(loop, wait_s)
        return answered

    def _schedule_send(self, loop: asyncio.AbstractEventLoop, wait_s: float) -> None:
        if wait_s > 0:
            self._linger = loop.call_later(wait_s, self._send_unsent)
        else:
            self._linger = None
            loop.call_soon(self._send_unsent)

    def _send_unsent(self) -> None:
        """Send this loop turn's acknowledgements: one request per MAX_ACKS_PER_REQUEST, none waiting for another."""
        self._send_scheduled = False
        self._linger = None
        unsent, self._unsent = self._unsent, []
        start, count = 0, len(unsent)
        while start < count:  # by index: popping the list's head was quadratic in the turn's acknowledgements
            end, size = start + 1, len(unsent[start][0])
            while end < count and size + len(unsent[end][0]) <= MAX_ACKS_PER_REQUEST:
                size += len(unsent[end][0])
                end += 1
            batch, start = unsent[start:end], end
            task = asyncio.get_running_loop().create_task(self._send(batch))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)

    async def _send(self, batch: list[tuple[list, str | None, asyncio.Future]]) -> None:
        acks = [ack for items, action, _ in batch if action for ack in items]
        accepts = _ranges([receipt for items, action, _ in batch if not action for receipt in items])
        request = m.ShareAcknowledgeRequest(group_id=self.group_id, topic=self.topic, acks=acks, accepts=accepts)
        try:
            response: m.ShareAcknowledgeResponse = await self.link.request(ApiKey.SHARE_ACKNOWLEDGE, request)
            if len(response.results) != len(request.acks):
                raise errors.TidewayError(f"{len(response.results)} results for {len(request.acks)} acknowledgements")
        except BaseException as exc:
            for _, _, answered in batch:
                if not answered.done():
                    answered.cancel() if isinstance(exc, asyncio.CancelledError) else answered.set_exception(exc)
            if not isinstance(exc, Exception):
                raise
            return
        if not response.accept_failures and not request.acks:  # all accepted: the common case, one pass
            for _, _, answered in batch:
                if not answered.done():
                    answered.set_result(None)
            return
        refused = {(r.partition, r.offset): r for r in response.accept_failures}
        start = 0
        for items, action, answered in batch:
            if action:  # results come in the order of the acknowledgements
                results = response.results[start:start + len(items)]
                start += len(items)
                failed = next((result for result in results if result.error_code), None)
            else:
                results = None
                failed = next((refused[(p, o)] for p, o, _ in items if (p, o) in refused), None) if refused else None
            if answered.done():
                continue
            if failed is None:
                answered.set_result(results)
            else:
                answered.set_exception(errors.error_for_code(
                    failed.error_code, f"{self.topic}-{failed.partition}@{failed.offset}: {failed.error_message}"))


def _ranges(receipts: list[tuple[int, int, int]]) -> list[m.AcceptRange]:
    """Receipts as ranges of consecutive offsets of one partition and delivery count (a receipt twice counts once)."""
    out = _runs(receipts)
    # Acks usually come in the order the messages were received: runs of offsets, a few per partition.
    # Sorting every receipt is needed only when runs overlap or touch (a receipt twice, or out of order).
    ordered = sorted(out, key=lambda r: (r.partition, r.first_offset))
    if any(a.partition == b.partition and b.first_offset <= a.last_offset + 1 for a, b in zip(ordered, ordered[1:], strict=False)):
        return _runs(sorted(set(receipts)))
    return out


def _runs(receipts) -> list[m.AcceptRange]:
    """Consecutive offsets of one partition and delivery count, in the order given, as ranges."""
    out: list[m.AcceptRange] = []
    last = None
    for partition, offset, count in receipts:
        if last is not None and last.partition == partition and last.delivery_count == count and last.last_offset + 1 == offset:
            last.last_offset = offset
        else:
            last = m.AcceptRange(partition, offset, offset, count)
            out.append(last)
    return out


# -- dead letters ------------------------------------------------------------------------------


def _redrive_group(dlq_topic: str) -> str:
    return f"{dlq_topic}.redrive"


async def _not_redriven(client: TidewayClient, link: CoordinatorLink, dlq_topic: str):
    """Yield (partition, record) for every dead letter past the redrive position, as the topic stood at the start.

    Records redriven one by one (a marker names them) and the markers themselves
    are skipped; a partition is read to its end before its first record is
    yielded, since a marker follows the letter it names.
    """
    for info in await client.partitions_for(dlq_topic):
        tp = (dlq_topic, info.partition)
        start = (await fetch_committed(link, [tp]))[tp]
        end, _ = await client.list_offset(dlq_topic, info.partition, m.LATEST_TIMESTAMP)
        consumer = Consumer(client, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        letters, redriven = [], set()
        try:
            await consumer.assign([tp], start=start if start >= 0 else "earliest")
            while consumer.position(tp) < end:
                for record in (await consumer.getmany(1000)).get(tp, []):
                    marker = dict(record.headers).get(REDRIVEN_HEADER)
                    if marker is not None:
                        redriven.add(int(record.value or b"-1"))
                    else:
                        letters.append(record)
        finally:
            await consumer.stop()
        for record in letters:
            if record.offset not in redriven:
                yield info.partition, record


async def list_dead_letters(client: TidewayClient, dlq_topic: str, *, limit: int = 100) -> list[dict]:
    """Dead letters not redriven yet, oldest first, with their origin headers."""
    out: list[dict] = []
    async with aclosing(_not_redriven(client, CoordinatorLink(client, _redrive_group(dlq_topic)), dlq_topic)) as letters:
        async for partition, record in letters:
            if len(out) >= limit:
                break
            headers = {k: (v or b"").decode(errors="replace") for k, v in record.headers}
            out.append({"partition": partition, "offset": record.offset, "timestamp_ms": record.timestamp_ms, "key": record.key,
                        "value": record.value, "headers": headers})
    return out


async def count_dead_letters(client: TidewayClient, dlq_topic: str, *, exact_up_to: int = 1000) -> tuple[int, bool]:
    """(how many dead letters wait, whether that is exact).

    Everything past the redrive position waits, less the letters redriven one
    by one and their markers; counting those means reading the letters, which
    is done when at most ``exact_up_to`` records lie past the position. Beyond
    that the answer is that number, an upper bound (cheap: one offset look per
    partition).
    """
    link = CoordinatorLink(client, _redrive_group(dlq_topic))
    partitions = [info.partition for info in await client.partitions_for(dlq_topic)]
    positions = await fetch_committed(link, [(dlq_topic, p) for p in partitions])
    past = 0
    for partition in partitions:
        end, _ = await client.list_offset(dlq_topic, partition, m.LATEST_TIMESTAMP)
        start = positions[(dlq_topic, partition)]
        if start < 0:
            start, _ = await client.list_offset(dlq_topic, partition, m.EARLIEST_TIMESTAMP)
        past += max(0, end - start)
    if past == 0 or past > exact_up_to:
        return past, past == 0
    waiting = 0
    async with aclosing(_not_redriven(client, link, dlq_topic)) as letters:
        async for _letter in letters:
            waiting += 1
    return waiting, True


async def redrive(client: TidewayClient, dlq_topic: str, *, rate_per_s: float = 100.0, limit: int | None = None,
                  selected: set[tuple[int, int]] | None = None) -> int:
    """Publish dead letters back to their origin topic at ``rate_per_s``; return how many.

    Every dead letter (the oldest ``limit``), or only the ``selected``
    (partition, offset) ones. Progress is committed as group ``<dlq>.redrive``
    after each message is acknowledged by the origin topic; a selected letter
    is marked redriven (a marker record in its partition) instead. So a redrive
    that stops half way carries on from there (a message may be redriven twice,
    never lost).
    """
    link = CoordinatorLink(client, _redrive_group(dlq_topic))
    namespace = split_tenant_prefix(dlq_topic)[0]  # "t2." when the caller names broker-side topics, else ""
    producer = Producer(client, acks="all", linger_ms=1)
    await producer.start()
    moved = 0
    interval = 1 / rate_per_s if rate_per_s > 0 else 0.0
    next_at = time.monotonic()
    try:
        async with aclosing(_not_redriven(client, link, dlq_topic)) as letters:
            async for partition, record in letters:
                if limit is not None and moved >= limit:
                    break
                if selected is not None and (partition, record.offset) not in selected:
                    continue
                origin = (dict(record.headers).get("tideway-dlq-origin-topic") or b"").decode()
                if origin:
                    origin = namespace + origin  # the header holds the tenant's own name
                    # Without the dead-letter headers, and due at once (no deliver-at).
                    kept = [(k, v) for k, v in record.headers if k not in DLQ_HEADERS and k != DEADLINE_HEADER]
                    delay = next_at - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    next_at = max(next_at, time.monotonic() - 1) + interval
                    await (await producer.send(origin, record.value, key=record.key, headers=kept))
                    moved += 1
                if selected is None:
                    await commit_offsets(link, {(dlq_topic, partition): record.offset + 1})
                else:
                    marker = await producer.send(dlq_topic, str(record.offset).encode(), partition=partition,
                                                 headers=[(REDRIVEN_HEADER, b"1")])
                    await marker
    finally:
        await producer.stop()
    return moved


async def purge_dead_letters(client: TidewayClient, dlq_topic: str) -> int:
    """Mark every dead letter as handled (the redrive position moves to the end); return how many there were.

    The records stay in the log until retention removes them, as any log's do,
    but they are no longer listed or redriven.
    """
    link = CoordinatorLink(client, _redrive_group(dlq_topic))
    ends = {info.partition: (await client.list_offset(dlq_topic, info.partition, m.LATEST_TIMESTAMP))[0]
            for info in await client.partitions_for(dlq_topic)}
    purged = 0
    async with aclosing(_not_redriven(client, link, dlq_topic)) as letters:
        async for partition, record in letters:
            purged += record.offset < ends[partition]
    for partition, end in ends.items():
        await commit_offsets(link, {(dlq_topic, partition): end})
    return purged
