"""Publishing a batch: checks, dedup reservation, produce, acknowledgement (shared by REST and WebSocket)."""

from __future__ import annotations

from tideway_server.gateway import catalog, limits, pool, schemas
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError, queue_not_found
from tideway_server.gateway.wire import OutgoingMessage, prepare

from tideway.native.producer import wait_records
from tideway.protocol import errors as broker_errors

__all__ = ["OutgoingMessage", "publish", "start_publish"]  # a message to publish is this module's input


async def publish(caller: Caller, queue: QueueInfo, messages: list[OutgoingMessage]) -> list[dict]:
    """Publish ``messages`` and return ``{"partition", "offset"}`` per message, once every in-sync replica has them.

    Refusals (size, schema, duplicates, rate) happen before anything is sent.
    When brokers fail part of the batch, 503 ``publish_failed`` lists, per
    message, where it went or why it failed (retry the failed ones: their
    dedup ids were freed).
    """
    return await (await start_publish(caller, queue, messages))


async def start_publish(caller: Caller, queue: QueueInfo, messages: list[OutgoingMessage]):
    """Check and send ``messages`` now (in call order); return an awaitable of the results (see ``publish``).

    Callers that publish several batches in order (a WebSocket) start the
    next one before the previous one is acknowledged.
    """
    batch_limit = min(queue.max_message_bytes, caller.limits.max_message_bytes)
    prepared = prepare(messages, batch_limit, queue.partitions)
    await schemas.validate(queue, [p.value for p in prepared])
    size = sum(len(p.value or b"") + len(p.key or b"") for p in prepared)
    await limits.take(caller, requests=1, publish_bytes=size)  # the request and its bytes, in one round trip
    dedup = [(i, p.dedup_id) for i, p in enumerate(prepared) if p.dedup_id is not None]
    await limits.reserve_dedup_ids(queue.id, dedup)
    try:
        producer = await pool.producer(queue.bootstrap)
        futures = await producer.send_many(queue.broker_topic, [(p.value, p.key, p.headers, p.partition) for p in prepared],
                                           batch_bytes_max=batch_limit)
    except BaseException as exc:
        await limits.settle_dedup_ids(queue.id, [(d, None) for _i, d in dedup])
        if isinstance(exc, broker_errors.UnknownTopicOrPartitionError):  # deleted since this process looked it up
            catalog.forget(queue.tenant_id, queue.name)
            raise queue_not_found(queue.name) from None
        raise
    return _acknowledged(queue, futures, dedup)


async def _acknowledged(queue: QueueInfo, futures: list, dedup: list[tuple[int, str]]) -> list[dict]:
    results, failed, deleted = [], 0, False
    for outcome in await wait_records(futures):
        if isinstance(outcome, BaseException):
            if not isinstance(outcome, broker_errors.TidewayError):
                raise outcome
            deleted |= isinstance(outcome, broker_errors.UnknownTopicOrPartitionError)
            failed += 1
            results.append({"error": {"code": "unavailable", "message": str(outcome)}})
        else:
            results.append({"partition": outcome.partition, "offset": outcome.offset})
    if dedup:
        await limits.settle_dedup_ids(queue.id, [(d, (results[i]["partition"], results[i]["offset"]) if "offset" in results[i] else None)
                                                 for i, d in dedup])
    if deleted:  # the queue was deleted since this process looked it up: not worth a retry
        catalog.forget(queue.tenant_id, queue.name)
        raise queue_not_found(queue.name)
    if failed:
        raise GatewayError("publish_failed", f"{failed} of {len(results)} messages were not acknowledged by the brokers; "
                           "the others were (see details.results); retry the failed ones",
                           details={"results": results}, retry_after_ms=1000)
    return results
