"""The queues the gateway serves: a tenant's queue name -> its broker topic and settings.

Read from the database at most once per ``QUEUE_CACHE_SECONDS`` per queue name
and process (a queue created, changed or deleted is seen within that time),
never once per message.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async

QUEUE_CACHE_SECONDS = 3.0
_CACHE_MAX = 10_000


@dataclass(frozen=True)
class QueueInfo:
    id: int
    tenant_id: int
    name: str
    mode: str  # "stream" or "queue"
    broker_topic: str
    dead_letter_topic: str
    partitions: int
    bootstrap: str
    max_message_bytes: int
    visibility_timeout_ms: int
    schema_subject: str
    schema_encoding: str
    fifo: bool = False
    sqs_settings: dict | None = None  # Queue.sqs_settings
    delivery_delay_ms: int = 0

    @property
    def is_queue(self) -> bool:
        return self.mode == "queue"


_queues: dict[tuple[int, str], tuple[float, QueueInfo | None]] = {}


def load(tenant_id: int, name: str) -> QueueInfo | None:
    """The queue, read from the database now (synchronous callers: the console)."""
    return _load(tenant_id, name)


def _load(tenant_id: int, name: str) -> QueueInfo | None:
    from django.db import close_old_connections
    from tideway_server.clusters.admin import bootstrap_of
    from tideway_server.topics.choices import QueueStatus
    from tideway_server.topics.models import Queue

    close_old_connections()  # the gateway bypasses Django's per-request connection handling
    row = Queue.objects.select_related("cluster").filter(tenant_id=tenant_id, name=name, status=QueueStatus.READY).first()
    if row is None:
        return None
    return QueueInfo(
        id=row.pk, tenant_id=tenant_id, name=row.name, mode=row.mode, broker_topic=row.broker_topic,
        dead_letter_topic=row.dead_letter_topic, partitions=row.partitions, bootstrap=bootstrap_of(row.cluster),
        max_message_bytes=row.max_message_bytes, visibility_timeout_ms=row.visibility_timeout_ms,
        schema_subject=row.schema_subject, schema_encoding=row.schema_encoding, fifo=row.fifo,
        sqs_settings=dict(row.sqs_settings or {}), delivery_delay_ms=row.delivery_delay_ms,
    )


def forget(tenant_id: int, name: str) -> None:
    """Drop a cached entry (the brokers said its topic is gone): the next lookup reads the database."""
    _queues.pop((tenant_id, name), None)


async def queue_named(tenant_id: int, name: str) -> QueueInfo | None:
    key = (tenant_id, name)
    now = time.monotonic()
    cached = _queues.get(key)
    if cached is not None and cached[0] > now:
        return cached[1]
    info = await sync_to_async(_load)(tenant_id, name)
    if len(_queues) >= _CACHE_MAX:
        _queues.clear()
    _queues[key] = (now + QUEUE_CACHE_SECONDS, info)
    return info
