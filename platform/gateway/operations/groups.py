"""Every group of a queue with its lag, and a reset or deletion of an idle stream group: the console's group pages.

Built to stay fast with thousands of groups: every group's positions come in one LIST_GROUPS per broker, the
log ends in one look per partition, so lag in messages is known for all of them at once; they are sorted by
it (furthest behind first), searched and cut into pages, and only the shown page's ages are looked up (one
fetch per distinct position, concurrently, as an unmetered inspector's read).
"""

from __future__ import annotations

import asyncio
import time

from tideway_server.gateway import pool
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.operations import broker_group, seek

from tideway.native.group import (
    CoordinatorLink,
    delete_offsets,
    describe_group,
    group_positions,
    timestamp_at,
)
from tideway.protocol.messages import EARLIEST_TIMESTAMP, INSPECTOR, LATEST_TIMESTAMP
from tideway.protocol.names import TenantNames

CONCURRENT_LOOKS = 16


async def lag_page(queue: QueueInfo, search: str, page: int, per_page: int) -> tuple[list[tuple], int, int]:
    """One page of the queue's groups, furthest behind first: ``([(name, kind, members, rows, lag)], total, page)``
    where each row is a partition's position, log end, lag and the age of its oldest unconsumed record."""
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


async def _idle(client, caller: Caller, group: str, doing: str):
    """The stream group described, refused while it has members: their next commit would undo ``doing``."""
    described = await describe_group(client, broker_group(caller, group, "stream"), "stream")
    if described.members:
        raise GatewayError("group_busy", f"group {group!r} has {len(described.members)} member(s): stop its consumers "
                           f"before {doing}")
    return described


async def reset_idle_group(caller: Caller, queue: QueueInfo, group: str, **where) -> dict[int, int]:
    """Move a stream group's positions (``seek``'s ``to``, ``offset`` or ``timestamp_ms``), refused while the group
    has members: their next commit would move the positions back."""
    await _idle(await pool.client(queue.bootstrap), caller, group, "moving its positions")
    return await seek(caller, queue, group, **where)


async def preview_reset(caller: Caller, queue: QueueInfo, group: str, **where) -> list[dict]:
    """What a reset would do, moving nothing: per partition the group's position now, where it would go, the log
    end, and how many records that re-reads (positive) or skips (negative). Refused while the group has members."""
    client = await pool.client(queue.bootstrap)
    described = await _idle(client, caller, group, "moving its positions")
    now = {c.partition: c.offset for c in described.offsets if c.topic == queue.broker_topic and c.offset >= 0}
    targets = await seek(caller, queue, group, dry_run=True, **where)
    ends = await client.list_offsets([(queue.broker_topic, p, LATEST_TIMESTAMP) for p in targets])
    rows = []
    for partition, after in sorted(targets.items()):
        before = now.get(partition)
        rows.append({"partition": partition, "now": before, "after": after,
                     "log_end": ends.get((queue.broker_topic, partition), (None,))[0],
                     "change": None if before is None else before - after})
    return rows


async def delete_idle_group(caller: Caller, queue: QueueInfo, group: str) -> int:
    """Forget a stream group's positions on this queue, refused while it has members (the coordinator refuses too:
    GROUP_SUBSCRIBED_TO_TOPIC); the group is gone once it has no position left anywhere. How many positions went."""
    client = await pool.client(queue.bootstrap)
    described = await _idle(client, caller, group, "deleting it")
    positions = [(c.topic, c.partition) for c in described.offsets if c.topic == queue.broker_topic]
    if not positions:
        raise GatewayError("group_not_found", f"group {group!r} has no position on {queue.name!r}")
    await delete_offsets(CoordinatorLink(client, broker_group(caller, group, "stream")), positions)
    return len(positions)
