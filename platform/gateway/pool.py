"""Pooled connections from the gateway to broker clusters (one client and one producer per cluster, and a few
transactional producers for atomic publishes).

The broker client keeps one connection per broker and knows partition
leaders; the producer batches records of concurrent requests into the same
produce requests (acks=all, idempotent), so a publish is acknowledged only
once every in-sync replica holds it. Everything here lives on the event loop
of the ASGI server that created it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid

from tideway.native import Producer, QueueConsumer, TidewayClient, TransactionalProducer
from tideway.native.group import CoordinatorLink
from tideway.protocol.messages import CONSUMER
from tideway.record.batch import Record, decode_records, iter_batches, read_header
from tideway.record.markers import AbortedFilter

# A publish not acknowledged by every in-sync replica in this time fails (503, retry):
# HTTP clients wait about this long, and dedup reservations outlive it (limits.PENDING_S).
DELIVERY_TIMEOUT_MS = 15_000

log = logging.getLogger(__name__)

_clients: dict[tuple[int, str], TidewayClient] = {}
_producers: dict[tuple[int, str], Producer] = {}
_starting: dict[tuple[int, str], asyncio.Future] = {}


def _key(bootstrap: str) -> tuple[int, str]:
    return id(asyncio.get_running_loop()), bootstrap


async def client(bootstrap: str) -> TidewayClient:
    key = _key(bootstrap)
    found = _clients.get(key)
    if found is not None:
        return found
    starting = _starting.get(key)
    if starting is None:
        starting = _starting[key] = asyncio.ensure_future(_start(key, bootstrap))
    try:
        return await asyncio.shield(starting)
    finally:
        if starting.done():
            _starting.pop(key, None)


async def _start(key: tuple[int, str], bootstrap: str) -> TidewayClient:
    from tideway_server.clusters.admin import broker_credentials

    new = TidewayClient(bootstrap, request_timeout_ms=30_000, credentials=broker_credentials())
    await new.start()
    # No linger: a request's messages are appended in one go and leave together on the sender's next
    # turn, and under load batches still fill while earlier requests are in flight; a linger of 1 ms
    # only delayed lone WebSocket publishes (publish ack p50 2.7 -> 1.9 ms at 1,000 msgs/s).
    producer = Producer(new, acks="all", linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS)
    await producer.start()
    _producers[key] = producer
    _clients[key] = new
    return new


async def producer(bootstrap: str) -> Producer:
    await client(bootstrap)
    return _producers[_key(bootstrap)]


# Atomic publishes of one process to one cluster run at most this many at once (a transactional producer has one
# transaction open at a time); more wait for a free one.
TRANSACTIONAL_PRODUCERS_MAX = 8
TRANSACTION_TIMEOUT_MS = 60_000  # the brokers abort a transaction of a process that died this long ago
# The transactional ids of this process: "_gateway.<process>.<slot>", a slot per concurrent producer. An id is
# reused when its producer is replaced (the new one fences the old); those of ended processes are forgotten by
# the brokers after a week without a transaction (transactional.id.expiration.ms).
_PROCESS = uuid.uuid4().hex[:12]
_txn_idle: dict[tuple[int, str], list[TransactionalProducer]] = {}
_txn_free_slots: dict[tuple[int, str], list[int]] = {}
_txn_slots: dict[tuple[int, str], asyncio.Semaphore] = {}


@contextlib.asynccontextmanager
async def transactional_producer(bootstrap: str):
    """A transactional producer of the cluster for one transaction, all the caller's while the block runs. It
    goes back to the pool when the block ends without an exception; after one it is replaced (its state unknown)."""
    key = _key(bootstrap)
    slots = _txn_slots.setdefault(key, asyncio.Semaphore(TRANSACTIONAL_PRODUCERS_MAX))
    async with slots:
        idle = _txn_idle.setdefault(key, [])
        free = _txn_free_slots.setdefault(key, list(range(TRANSACTIONAL_PRODUCERS_MAX)))
        if idle:
            producer = idle.pop()
        else:
            slot = free.pop()
            producer = TransactionalProducer(await client(bootstrap), f"_gateway.{_PROCESS}.{slot}", acks="all",
                                             linger_ms=0, delivery_timeout_ms=DELIVERY_TIMEOUT_MS,
                                             transaction_timeout_ms=TRANSACTION_TIMEOUT_MS)
            try:
                await producer.start()
            except BaseException:
                free.append(slot)
                await producer.stop(timeout_s=0)
                raise
        try:
            yield producer
        except BaseException:
            free.append(int(producer.transactional_id.rsplit(".", 1)[1]))
            try:
                await producer.stop(timeout_s=1)
            except Exception as exc:  # noqa: BLE001 - replaced anyway
                log.info("transactional producer %s: stop failed: %s", producer.transactional_id, exc)
            raise
        idle.append(producer)


READ_RETRY_S = 2.0


async def read_partition(bootstrap: str, topic: str, partition: int, offset: int, *, max_records: int,
                         wait_ms: int, max_bytes: int = 4 << 20,
                         replica_id: int = CONSUMER) -> tuple[list[Record], int, int]:
    """Up to ``max_records`` records of one partition from ``offset``: (records, next offset, high watermark).
    ``replica_id`` INSPECTOR: a look by the platform (the console's message browser), not the tenant's egress."""
    broker_client = await client(bootstrap)
    # A moving leader is waited for briefly; a request should not hang on a partition that is gone.
    result = await broker_client.fetch(topic, partition, offset, max_bytes=max_bytes, wait_ms=wait_ms,
                                       retry_for_s=READ_RETRY_S, replica_id=replica_id)
    # Committed records only: the fetch stopped before open transactions; aborted ones and markers are dropped
    # here, and the next offset moves past them too (a reader never stops at a marker).
    records: list[Record] = []
    next_offset = offset
    data = result.records
    keep = AbortedFilter(result.aborted_transactions)
    for position, _base, _size in iter_batches(data):
        header = read_header(data, position)
        if keep.delivers(header):
            batch = [r for r in decode_records(data, position) if r.offset >= offset]
            room = max_records - len(records)
            if len(batch) > room:
                records.extend(batch[:room])
                return records, records[-1].offset + 1, result.high_watermark
            records.extend(batch)
        next_offset = max(next_offset, header.next_offset)
        if len(records) >= max_records:
            break
    return records, next_offset, result.high_watermark


_queue_consumers: dict[tuple[int, str, str, str], QueueConsumer] = {}
# Acknowledgements of one queue group from every client of this process, gathered this long into one
# request (and one replicated state write on the brokers). Subscribers ack a message or two at a time:
# at 1,000 msgs/s a request each cost two follower fetches more per message. A WebSocket subscriber's
# credit is free as soon as it acks (only the `acked` answer waits), so its acks wait 10 ms: against
# 2 ms, the whole machine's CPU per message fell 7% at 1,000 msgs/s (docs/benchmarks.md). A REST
# client waits for its ack's answer: 2 ms at most.
ACK_LINGER_MS = float(os.environ.get("TIDEWAY_GATEWAY_ACK_LINGER_MS", "10"))
REST_ACK_LINGER_MS = min(ACK_LINGER_MS, 2.0)
_links: dict[tuple[int, str, str], CoordinatorLink] = {}
_LINKS_MAX = 10_000


async def queue_consumer(bootstrap: str, group_id: str, topic: str) -> QueueConsumer:
    """A queue consumer of ``group_id`` on ``topic`` (kept, so its group coordinator is found once)."""
    key = (*_key(bootstrap), group_id, topic)
    found = _queue_consumers.get(key)
    if found is None:
        if len(_queue_consumers) >= _LINKS_MAX:
            _queue_consumers.clear()
        found = _queue_consumers[key] = QueueConsumer(await client(bootstrap), group_id, topic, ack_linger_ms=ACK_LINGER_MS)
    return found


async def coordinator(bootstrap: str, group_id: str) -> CoordinatorLink:
    """The link to ``group_id``'s coordinator (kept, as above)."""
    key = (*_key(bootstrap), group_id)
    found = _links.get(key)
    if found is None:
        if len(_links) >= _LINKS_MAX:
            _links.clear()
        found = _links[key] = CoordinatorLink(await client(bootstrap), group_id)
    return found
