"""A queue's consumer groups with their lag: in messages, in seconds (the age of the oldest record not yet
consumed), and a time-to-drain estimate from the produce and consume rates between two looks.

Rates need two samples: each look keeps (time, positions, log ends) per group in the cache, so the figures
settle after the page's second refresh (every few seconds).
"""

from __future__ import annotations

import time

from django.core.cache import cache

from brokers.client.group import describe_group, group_lag, list_groups
from brokers.security.names import TenantNames
from gateway import pool
from gateway.catalog import QueueInfo

SAMPLE_KEEP_S = 300


async def _lags(queue: QueueInfo) -> list[tuple[str, str, int, list[dict]]]:
    client = await pool.client(queue.bootstrap)
    names = TenantNames(queue.tenant_id)
    out = []
    for broker_group, kind in await list_groups(client, topic=queue.broker_topic):
        own = names.own_group(broker_group)
        if own is None:
            continue
        members = len((await describe_group(client, broker_group, kind)).members)
        rows = [row for row in await group_lag(client, broker_group, kind) if row["topic"] == queue.broker_topic]
        out.append((own[0], kind, members, rows))
    return out


def groups_of(queue: QueueInfo, run) -> list[dict]:
    """Rows for the queue page, one per group; ``run`` runs the async part on the server's loop."""
    now = time.monotonic()
    table = []
    for name, kind, members, rows in run(_lags, queue):
        position = sum(r["position"] for r in rows)
        end = sum(r["log_end"] for r in rows)
        lag = sum(r["lag"] for r in rows)
        ages = [r["oldest_age_ms"] for r in rows if r["oldest_age_ms"] is not None]
        key = f"console-lag:{queue.id}:{kind}:{name}"
        previous = cache.get(key)
        cache.set(key, (now, position, end), SAMPLE_KEEP_S)
        consume_rate = produce_rate = drain_s = None
        if previous is not None and now - previous[0] >= 0.5:
            elapsed = now - previous[0]
            consume_rate = max(position - previous[1], 0) / elapsed
            produce_rate = max(end - previous[2], 0) / elapsed
            if lag and consume_rate > produce_rate:
                drain_s = lag / (consume_rate - produce_rate)
        table.append({"name": name, "kind": kind, "members": members, "lag": lag, "lag_seconds": max(ages) / 1000 if ages else 0.0,
                      "partitions": rows, "consume_rate": consume_rate, "produce_rate": produce_rate,
                      "drain_s": drain_s, "falling_behind": bool(lag) and consume_rate is not None and drain_s is None})
    return table
