"""A queue's consumer groups with their lag: in messages, in seconds (the age of the oldest record not yet
consumed), and a time-to-drain estimate from the produce and consume rates between two looks.

The look itself is the gateway's operation (``gateway.operations.groups.lag_page``: one LIST_GROUPS per
broker, ages looked up for the shown page only); this module keeps the rates.

Rates need two samples: each look keeps (time, position, log end) per shown group in the cache, so the
figures settle after the page's second refresh (every few seconds).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from django.core.cache import cache
from tideway_server.gateway.operations.groups import lag_page
from tideway_server.gateway.operations.members import QueueInfo

SAMPLE_KEEP_S = 300
PAGE_SIZE = 50


@dataclass
class GroupPage:
    groups: list[dict] = field(default_factory=list)
    total: int = 0  # groups matching the search
    page: int = 1
    pages: int = 1


def groups_of(queue: QueueInfo, run, *, search: str = "", page: int = 1, per_page: int = PAGE_SIZE) -> GroupPage:
    """One page of the queue's groups, furthest behind first; ``run`` runs the async part on the server's loop."""
    shown, total, page = run(lag_page, queue, search, page, per_page)
    now = time.monotonic()
    keys = {name: f"console-lag:{queue.id}:{kind}:{name}" for name, kind, *_ in shown}
    previous_samples = cache.get_many(list(keys.values()))
    samples = {}
    table = []
    for name, kind, members, rows, lag in shown:
        position = sum(r["position"] for r in rows)
        end = sum(r["log_end"] for r in rows)
        ages = [r["oldest_age_ms"] for r in rows if r["oldest_age_ms"] is not None]
        previous = previous_samples.get(keys[name])
        samples[keys[name]] = (now, position, end)
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
    cache.set_many(samples, SAMPLE_KEEP_S)
    return GroupPage(groups=table, total=total, page=page, pages=max(1, -(-total // per_page)))
