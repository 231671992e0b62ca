"""Background work of the gateway (Celery): dead-letter redrives at a rate, SQS message move tasks."""

from __future__ import annotations

import asyncio
import logging

from celery import shared_task

from tideway.native import TidewayClient
from tideway.native.queue import redrive

log = logging.getLogger(__name__)


@shared_task(name="gateway.redrive_dead_letters")
def redrive_dead_letters(queue_id: int, rate_per_s: float, limit: int | None, selected: list | None = None) -> dict:
    """Move dead letters of queue ``queue_id`` back to it (all, or the selected [partition, offset] ones);
    safe to run again after a crash (see tideway.native.queue.redrive)."""
    from tideway_server.clusters.admin import bootstrap_of, broker_credentials
    from tideway_server.topics.models import Queue

    queue = Queue.objects.select_related("cluster").get(pk=queue_id)
    bootstrap = bootstrap_of(queue.cluster)  # read the database here, not inside the event loop
    credentials = broker_credentials()

    async def run() -> int:
        async with TidewayClient(bootstrap, credentials=credentials) as client:
            chosen = None if selected is None else {(p, o) for p, o in selected}
            return await redrive(client, queue.dead_letter_topic, rate_per_s=rate_per_s, limit=limit, selected=chosen)

    moved = asyncio.run(run())
    log.info("redrove %d dead letters of %s at up to %.1f/s", moved, queue, rate_per_s)
    return {"queue_id": queue_id, "moved": moved}


@shared_task(name="gateway.sqs_move_messages")
def sqs_move_messages(source_id: int, destination_id: int | None, rate_per_s: int, handle: str, tenant_id: int) -> dict:
    """An SQS message move task (gateway/sqs/moves.py): receive the dead-letter queue's messages through its group
    ``sqs``, publish each to its origin (or the destination) with acks=all, then delete it; until the queue has
    nothing left to receive, the task is cancelled, or it fails. Progress in Redis as it goes."""
    import redis
    from django.conf import settings
    from tideway_server.clusters.admin import bootstrap_of, broker_credentials
    from tideway_server.gateway.sqs.common import GROUP
    from tideway_server.gateway.sqs.moves import state_key
    from tideway_server.topics.models import Queue

    from tideway.native import Producer
    from tideway.native.queue import DEADLINE_HEADER, QueueConsumer
    from tideway.protocol.headers import DLQ_HEADERS
    from tideway.protocol.names import TenantNames

    source = Queue.objects.select_related("cluster").get(pk=source_id)
    destination = Queue.objects.get(pk=destination_id).broker_topic if destination_id else None
    bootstrap, credentials = bootstrap_of(source.cluster), broker_credentials()
    db = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL)
    key = state_key(source_id, handle)
    namespace = f"t{tenant_id}."

    async def run() -> int:
        moved, empty, interval = 0, 0, 1 / rate_per_s
        async with TidewayClient(bootstrap, credentials=credentials) as client, \
                Producer(client, acks="all", linger_ms=1) as producer, \
                QueueConsumer(client, TenantNames(tenant_id).group(GROUP, "queue"), source.broker_topic) as consumer:
            while empty < 2:
                if db.hget(key, "status") == b"CANCELLING":
                    return moved
                started = asyncio.get_running_loop().time()
                messages = await consumer.receive(min(100, rate_per_s), wait_ms=1000, lock_ms=60_000)
                empty = 0 if messages else empty + 1
                # The batch is published, then (once every copy is acknowledged) deleted in one acknowledgement.
                sent = []
                for message in messages:
                    origin = (dict(message.headers).get("tideway-dlq-origin-topic") or b"").decode()
                    target = destination or (namespace + origin if origin else None)
                    if target is None:  # not a dead letter: nowhere to move it back to (its lock lapses later)
                        continue
                    kept = [(k, v) for k, v in message.headers if k not in DLQ_HEADERS and k != DEADLINE_HEADER]
                    sent.append((message, await producer.send(target, message.value, key=message.key, headers=kept)))
                if sent:
                    await asyncio.gather(*(future for _, future in sent))
                    await consumer.ack([message for message, _ in sent])
                    moved += len(sent)
                db.hset(key, "moved", moved)
                spent = asyncio.get_running_loop().time() - started
                if messages and spent < len(messages) * interval:
                    await asyncio.sleep(len(messages) * interval - spent)
        return moved

    try:
        moved = asyncio.run(run())
    except Exception as exc:
        log.exception("SQS move task %s of %s failed", handle, source)
        db.hset(key, mapping={"status": "FAILED", "failure": str(exc)[:500]})
        raise
    cancelled = db.hget(key, "status") == b"CANCELLING"
    db.hset(key, mapping={"status": "CANCELLED" if cancelled else "COMPLETED", "moved": moved})
    log.info("SQS move task %s moved %d messages of %s", handle, moved, source)
    return {"moved": moved}
