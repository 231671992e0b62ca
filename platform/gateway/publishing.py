"""Publishing a batch: checks, dedup reservation, produce, acknowledgement (shared by REST and WebSocket); and
publishing to several queues at once, all or nothing (a transaction)."""

from __future__ import annotations

from tideway_server.gateway import catalog, limits, pool, schemas
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError, invalid, queue_not_found
from tideway_server.gateway.wire import MAX_MESSAGES_PER_REQUEST, OutgoingMessage, Prepared, prepare

from tideway.native.producer import wait_records
from tideway.native.transactions import describe_transaction
from tideway.protocol import errors as broker_errors

__all__ = ["OutgoingMessage", "publish", "publish_atomically", "start_publish"]  # a message to publish is the input


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
    batch_limit = _batch_limit(caller, queue)
    prepared = await _checked(queue, messages, batch_limit)
    await limits.take(caller, requests=1, publish_bytes=_size(prepared))  # the request and its bytes, in one trip
    dedup = _dedup_ids(prepared)
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


def _batch_limit(caller: Caller, queue: QueueInfo) -> int:
    return min(queue.max_message_bytes, caller.limits.max_message_bytes)


async def _checked(queue: QueueInfo, messages: list[OutgoingMessage], batch_limit: int) -> list[Prepared]:
    prepared = prepare(messages, batch_limit, queue.partitions)
    await schemas.validate(queue, [p.value for p in prepared])
    return prepared


def _size(prepared: list[Prepared]) -> int:
    return sum(len(p.value or b"") + len(p.key or b"") for p in prepared)


def _dedup_ids(prepared: list[Prepared]) -> list[tuple[int, str]]:
    return [(i, p.dedup_id) for i, p in enumerate(prepared) if p.dedup_id is not None]


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


async def publish_atomically(caller: Caller, batches: list[tuple[QueueInfo, list[OutgoingMessage]]]) -> list[list[dict]]:
    """Publish to several queues of the caller's tenant in one transaction: every message is stored and readable,
    or none is (the transaction aborts). Per queue, in order, ``{"partition", "offset"}`` per message.

    The queues must live on one cluster (a transaction has one coordinator). Every check (sizes, schemas, dedup
    ids, the rate limit) is made for all of them before anything is sent; a failure after that aborts the
    transaction and answers 503 ``publish_failed`` with nothing published (retry the whole request).
    """
    if sum(len(messages) for _queue, messages in batches) > MAX_MESSAGES_PER_REQUEST:
        raise invalid(f"at most {MAX_MESSAGES_PER_REQUEST} messages in one request, over all its queues")
    names = [queue.name for queue, _messages in batches]
    if len(set(names)) < len(names):
        raise invalid("a queue appears twice: put all of its messages in one entry")
    if len({queue.bootstrap for queue, _messages in batches}) > 1:
        raise invalid(f"queues {', '.join(names)} live on different clusters: one atomic publish reaches one cluster")
    checked: list[tuple[QueueInfo, list[Prepared], int]] = []
    for queue, messages in batches:
        limit = _batch_limit(caller, queue)
        try:
            checked.append((queue, await _checked(queue, messages, limit), limit))
        except GatewayError as exc:
            exc.message = f"queue {queue.name!r}: {exc.message}"
            exc.details = {**exc.details, "queue": queue.name}
            raise
    await limits.take(caller, requests=1, publish_bytes=sum(_size(prepared) for _q, prepared, _l in checked))
    reserved: list[tuple[QueueInfo, list[tuple[int, str]]]] = []
    try:
        for queue, prepared, _limit in checked:
            dedup = _dedup_ids(prepared)
            try:
                await limits.reserve_dedup_ids(queue.id, dedup)
            except GatewayError as exc:
                exc.details = {**exc.details, "queue": queue.name}
                raise
            reserved.append((queue, dedup))
        results = await _in_one_transaction(checked)
    except BaseException:
        for queue, dedup in reserved:
            await limits.settle_dedup_ids(queue.id, [(d, None) for _i, d in dedup])
        raise
    for (queue, dedup), found in zip(reserved, results, strict=True):
        await limits.settle_dedup_ids(queue.id, [(d, (found[i]["partition"], found[i]["offset"])) for i, d in dedup])
    return results


async def _in_one_transaction(checked: list[tuple[QueueInfo, list[Prepared], int]]) -> list[list[dict]]:
    bootstrap = checked[0][0].bootstrap
    async with pool.transactional_producer(bootstrap) as producer:
        producer.begin()
        try:
            sent = [await producer.send_many(queue.broker_topic, [(p.value, p.key, p.headers, p.partition) for p in prepared],
                                              batch_bytes_max=limit) for queue, prepared, limit in checked]
            outcomes = [await wait_records(futures) for futures in sent]
            failed = next((o for done in outcomes for o in done if isinstance(o, BaseException)), None)
            if failed is not None:
                raise failed
        except BaseException as exc:
            await producer.abort()  # (an abort that fails too replaces the producer: the brokers time it out)
            _raise_for(checked, exc)
        try:
            await producer.commit()
        except broker_errors.TidewayError as exc:
            if not await _committed_anyway(producer):
                await producer.abort()
                _raise_for(checked, exc)
    return [[{"partition": o.partition, "offset": o.offset} for o in done] for done in outcomes]


async def _committed_anyway(producer) -> bool:
    """After a commit whose answer was lost: whether the coordinator had decided to commit (the transaction's
    outcome is the coordinator's, whatever the answer said)."""
    try:
        txn = await describe_transaction(producer.client, producer.transactional_id)
    except broker_errors.TidewayError:
        raise GatewayError("unavailable", "the brokers did not say whether the transaction committed; publish again "
                           "with the same dedup ids to be sure it is stored once", retry_after_ms=1000) from None
    return txn.producer_epoch == producer.producer_epoch and txn.state in ("PrepareCommit", "CompleteCommit")


def _raise_for(checked, exc: BaseException):
    if isinstance(exc, broker_errors.UnknownTopicOrPartitionError):  # a queue deleted since it was looked up
        for queue, _prepared, _limit in checked:
            catalog.forget(queue.tenant_id, queue.name)
        raise GatewayError("queue_not_found", "a queue of the request no longer exists; nothing was published") from None
    if isinstance(exc, broker_errors.MessageTooLargeError):
        raise GatewayError("message_too_large", f"{exc.message}; nothing was published") from None
    if isinstance(exc, broker_errors.TidewayError):
        raise GatewayError("publish_failed", f"the transaction was aborted, nothing of it was published ({exc}); "
                           "retry the whole request", retry_after_ms=1000) from None
    raise exc
