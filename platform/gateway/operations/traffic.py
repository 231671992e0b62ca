"""What a queue and a tenant carried, from the brokers' own traffic counters (DESCRIBE_TRAFFIC), and how
often the tenant's rate limits held it back (from the gateway's Redis).

A queue's counters (messages and bytes in and out since the brokers started) feed the console queue page's
live chart, which turns two looks into rates. A tenant's last hour, minute by minute, feeds the dashboard's
chart; it is the sum over the clusters the tenant's queues live on. Brokers keep both in memory: a
broker's restart starts its counts again (the charts treat a fall as a restart, not as negative traffic).
"""

from __future__ import annotations

import asyncio
import time

import redis
from django.conf import settings
from tideway_server.clusters.admin import bootstrap_of
from tideway_server.clusters.models import Cluster
from tideway_server.controlplane.errors import ActionError
from tideway_server.gateway import limits, pool
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError

from tideway.native.traffic import describe_traffic
from tideway.protocol import errors
from tideway.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tideway.protocol.names import TenantNames

FIELDS = ("messages_in", "bytes_in", "messages_out", "bytes_out")


async def queue_counters(queue: QueueInfo) -> dict:
    """Cumulative figures of the queue's topic, summed over the brokers, with the time they were read; when no
    broker answers, ``{"error": why}`` (a chart skips that look)."""
    try:
        traffic = await describe_traffic(await pool.client(queue.bootstrap), [queue.broker_topic])
    except (errors.TidewayError, OSError) as exc:
        return {"error": f"the brokers did not answer: {exc}"}
    counts = traffic.topics.get(queue.broker_topic, [0, 0, 0, 0])
    return {"t": round(time.time(), 3), **dict(zip(FIELDS, counts, strict=True)), "missing_brokers": traffic.missing}


def tenant_bootstraps(tenant_id: int) -> list[str]:
    """The bootstrap addresses of the clusters the tenant's queues live on (a database read: call it outside the
    event loop, then hand the list to ``tenant_last_hour``)."""
    return sorted({bootstrap_of(cluster) for cluster in Cluster.objects.filter(queues__tenant_id=tenant_id).distinct()})


async def tenant_last_hour(tenant_id: int, bootstraps: list[str]) -> dict:
    """The tenant's last 60 minutes: one point per minute (zeros where nothing moved), oldest first."""
    scope = TenantNames(tenant_id).topic_prefix
    minutes: dict[int, list[int]] = {}
    missing, failed = 0, []
    for bootstrap in bootstraps:
        try:
            traffic = await describe_traffic(await pool.client(bootstrap), [], history_scope=scope)
        except (errors.TidewayError, OSError) as exc:
            failed.append(str(exc))  # a whole cluster unreachable: the chart shows the others, and says so
            continue
        missing += len(traffic.missing)
        for minute, counts in traffic.history.items():
            into = minutes.setdefault(minute, [0, 0, 0, 0])
            for i, value in enumerate(counts):
                into[i] += value
    now_minute = int(time.time()) // 60 * 60
    starts = [now_minute - 60 * back for back in range(59, -1, -1)]
    series = {field: [minutes.get(start, [0, 0, 0, 0])[i] for start in starts] for i, field in enumerate(FIELDS)}
    return {"minutes": starts, **series, "missing_brokers": missing, "errors": failed}


def tenant_throttling(tenant_id: int) -> dict:
    """How often each rate limit held the tenant back: ``{"last_minute" | "last_hour" | "last_day": {limit: count}}``
    (``limits.throttled_counts``); refused ``unavailable`` when the gateway's Redis does not answer."""
    connection = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        return limits.throttled_counts(connection, [tenant_id])[tenant_id]
    except (redis.RedisError, OSError) as exc:
        raise GatewayError("unavailable", f"the rate limiter (Redis) did not answer: {exc}") from exc
    finally:
        connection.close()


def topics_by_cluster(queues) -> dict[str, dict[str, int]]:
    """The queues' broker topics and partition counts, by their cluster's bootstrap (one query per cluster);
    queues of a cluster with no live broker are left out."""
    bootstraps: dict[int, str | None] = {}
    out: dict[str, dict[str, int]] = {}
    for queue in queues:
        if queue.cluster is None or not queue.broker_topic:
            continue
        if queue.cluster_id not in bootstraps:
            try:
                bootstraps[queue.cluster_id] = bootstrap_of(queue.cluster)
            except ActionError:
                bootstraps[queue.cluster_id] = None
        if bootstraps[queue.cluster_id]:
            out.setdefault(bootstraps[queue.cluster_id], {})[queue.broker_topic] = queue.partitions
    return out


async def queue_list_figures(bootstrap: str, partitions: dict[str, int]) -> dict[str, dict]:
    """For the console's queue list: per topic of one cluster, the messages stored (high watermark minus first
    offset, over its partitions; None when a leader did not answer) and the cumulative traffic counters. Two
    offset requests per leader and one traffic request per broker, whatever the number of queues."""
    client = await pool.client(bootstrap)
    wanted = [(topic, p) for topic, count in partitions.items() for p in range(count)]
    firsts, ends = await asyncio.gather(client.list_offsets([(t, p, EARLIEST_TIMESTAMP) for t, p in wanted]),
                                        client.list_offsets([(t, p, LATEST_TIMESTAMP) for t, p in wanted]))
    traffic = await describe_traffic(client, list(partitions))
    out = {}
    for topic, count in partitions.items():
        spans = [(firsts.get((topic, p)), ends.get((topic, p))) for p in range(count)]
        stored = None if any(a is None or b is None for a, b in spans) else sum(max(0, b[0] - a[0]) for a, b in spans)
        out[topic] = {"stored": stored, "counters": traffic.topics.get(topic, [0, 0, 0, 0]), "t": time.time()}
    return out
