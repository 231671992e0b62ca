"""A queue's consumer groups with their lag: in messages, in seconds (the age of the oldest record not yet
consumed), and a time-to-drain estimate from the produce and consume rates between two looks.

Built to stay fast with thousands of groups: every group's positions come in one LIST_GROUPS per broker, the
log ends in one look per partition, so lag in messages is known for all of them at once; they are sorted by
it (furthest behind first), searched and cut into pages, and only the shown page's ages are looked up (one
fetch per distinct position, concurrently, as an unmetered inspector's read).

Rates need two samples: each look keeps (time, position, log end) per shown group in the cache, so the
figures settle after the page's second refresh (every few seconds).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from django.core.cache import cache

from gateway import pool
from gateway.catalog import QueueInfo
from tideway.native.group import group_positions, timestamp_at
from tideway.protocol.messages import EARLIEST_TIMESTAMP, INSPECTOR, LATEST_TIMESTAMP
from tideway.protocol.names import TenantNames

SAMPLE_KEEP_S = 300
PAGE_SIZE = 50
CONCURRENT_LOOKS = 16


@dataclass
class GroupPage:
    groups: list[dict] = field(default_factory=list)
    total: int = 0  # groups matching the search
    page: int = 1
    pages: int = 1


async def _page(queue: QueueInfo, search: str, page: int, per_page: int) -> tuple[list[tuple], int, int]:
    client = await pool.client(queue.bootstrap)
    topic = queue.broker_topic
    names = TenantNames(queue.tenant_id)
    listed = await group_positions(client, topic)
    partitions = range(queue.partitions)
    ends_and_starts = await asyncio.gather(*(client.list_offset(topic, p, LATEST_TIMESTAMP) for p in partitions),
                                           *(client.list_offset(topic, p, EARLIEST_TIMESTAMP) for p in partitions))
    ends = [answer[0] for answer in ends_and_starts[:queue.partitions]]
    starts = [answer[0] for answer in ends_and_starts[queue.partitions:]]
    needle = search.lower()
    found = []
    for group in listed:
        own = names.own_group(group.group_id)
        if own is None or (needle and needle not in own[0].lower()):
            continue
        positions = {p.partition: p.offset for p in group.positions if p.topic == topic and 0 <= p.partition < queue.partitions}
        if own[1] == "queue":  # a partition it has not received from yet: it starts at the oldest record there
            positions = {p: positions.get(p, starts[p]) for p in partitions}
        rows = [{"partition": p, "position": o, "log_end": ends[p], "lag": max(0, ends[p] - o)}
                for p, o in sorted(positions.items()) if o >= 0]
        found.append((own[0], own[1], group.members, rows, sum(r["lag"] for r in rows)))
    found.sort(key=lambda g: (-g[4], g[0]))
    pages = max(1, -(-len(found) // per_page))
    page = min(max(page, 1), pages)
    shown = found[(page - 1) * per_page: page * per_page]
    # The age of the oldest unconsumed record: one look per distinct (partition, position) behind its log end.
    wanted = sorted({(r["partition"], r["position"]) for g in shown for r in g[3] if r["lag"]})
    limit = asyncio.Semaphore(CONCURRENT_LOOKS)

    async def look(partition: int, offset: int) -> int | None:
        async with limit:
            return await timestamp_at(client, topic, partition, offset, replica_id=INSPECTOR)

    stamps = dict(zip(wanted, await asyncio.gather(*(look(p, o) for p, o in wanted)), strict=True))
    now = int(time.time() * 1000)
    for _name, _kind, _members, rows, _lag in shown:
        for row in rows:
            stamp = stamps.get((row["partition"], row["position"])) if row["lag"] else None
            row["oldest_age_ms"] = None if stamp is None else max(0, now - stamp)
    return shown, len(found), page


def groups_of(queue: QueueInfo, run, *, search: str = "", page: int = 1, per_page: int = PAGE_SIZE) -> GroupPage:
    """One page of the queue's groups, furthest behind first; ``run`` runs the async part on the server's loop."""
    shown, total, page = run(_page, queue, search, page, per_page)
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
