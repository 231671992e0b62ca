"""Celery's side of lag: a look at every group every few seconds (beat: ``TIDEWAY_LAG_SAMPLE_S``, 5 by default).

Runs on the ``monitoring`` queue, which `tideway up` serves with a worker of its own, so a look never waits
behind a redrive or a Spark job. A look that has not started when the next is due is dropped (beat sets
``expires``), so looks never pile up.
"""

from __future__ import annotations

import asyncio
import logging
import time

from celery import shared_task

log = logging.getLogger(__name__)


def _queues_by_cluster() -> dict:
    from tideway_server.clusters.admin import bootstrap_of
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.lag.sampler import QueueRef
    from tideway_server.topics.choices import QueueStatus
    from tideway_server.topics.models import Queue

    out: dict[tuple[str, str], list[QueueRef]] = {}
    bootstraps: dict[int, str | None] = {}
    for row in Queue.objects.select_related("cluster").filter(status=QueueStatus.READY):
        if row.cluster_id not in bootstraps:
            try:
                bootstraps[row.cluster_id] = bootstrap_of(row.cluster)
            except ActionError:
                bootstraps[row.cluster_id] = None  # no live broker: nothing to look at now
        if bootstraps[row.cluster_id] is None:
            continue
        out.setdefault((row.cluster.name, bootstraps[row.cluster_id]), []).append(QueueRef(
            tenant_id=row.tenant_id, name=row.name, broker_topic=row.broker_topic,
            dead_letter_topic=row.dead_letter_topic if row.mode == "queue" else "", partitions=row.partitions))
    return out


async def _look(clusters: dict, key: str) -> int:
    import redis.asyncio as redis
    from django.conf import settings
    from tideway_server.lag import store
    from tideway_server.lag.sampler import sample_cluster

    from tideway.native import TidewayClient
    from tideway.native.credentials import ApiKey

    connection = redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    groups = 0
    try:
        for (cluster, bootstrap), queues in clusters.items():
            tenant_ids = sorted({q.tenant_id for q in queues})
            async with TidewayClient(bootstrap, credentials=ApiKey(key)) as client:
                previous = await store.latest(connection, tenant_ids)
                now_ms = int(time.time() * 1000)
                samples = await sample_cluster(client, queues, previous, now_ms)
                await store.save_latest(connection, tenant_ids, samples)
                await store.publish(client, cluster, samples, now_ms)
            groups += len(samples)
    finally:
        await connection.aclose()
    return groups


@shared_task(name="lag.sample")
def sample() -> dict:
    """Look at every consumer group of every cluster once."""
    from tideway_server.clusters.admin import broker_credentials

    started = time.perf_counter()
    clusters = _queues_by_cluster()
    groups = asyncio.run(_look(clusters, broker_credentials().key)) if clusters else 0
    return {"clusters": len(clusters), "groups": groups, "seconds": round(time.perf_counter() - started, 3)}


@shared_task(name="lag.rollup")
def rollup() -> dict:
    """Run the consumer_lag Spark job (on the ``billing`` queue, with the other Spark jobs)."""
    import os

    from tideway_server.lag.job import run_consumer_lag

    return run_consumer_lag(master=os.environ.get("TIDEWAY_SPARK_MASTER", "local[2]"), progress=log.info)
