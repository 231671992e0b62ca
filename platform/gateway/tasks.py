"""Background work of the gateway (Celery): dead-letter redrives at a rate."""

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
