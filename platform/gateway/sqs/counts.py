"""SQS's approximate counts of a queue (``GetQueueAttributes``), from the queue group's real state on the brokers
and a look at what the group has not read yet."""

from __future__ import annotations

import time

from tideway_server.gateway import operations, pool
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.sqs.common import GROUP, Context

from tideway.protocol.headers import DEADLINE_HEADER
from tideway.protocol.messages import INSPECTOR
from tideway.record.batch import decode_records, iter_batches, read_header
from tideway.record.markers import readable_batches

MAX_DELAY_S = 900  # SQS's longest DelaySeconds


async def counts(ctx: Context, queue: QueueInfo) -> dict[str, str]:
    """SQS's approximate counts from the queue group's real state, per partition: what the group has read is
    available, in flight, delayed or on its way to the dead letters (what it acknowledged is none of these); what
    it has not read yet (from the log's first record on) is visible unless its delivery time is still to come."""
    try:
        view = await operations.group_view(ctx.caller, queue, GROUP, "queue")
        shares = {row["partition"]: row for row in view["partitions"]}
    except GatewayError as exc:
        if exc.code != "group_not_found":
            raise
        shares = {}
    client = await pool.client(queue.bootstrap)
    now = int(time.time() * 1000)
    visible = not_visible = delayed = 0
    for number, (start, end) in enumerate(await operations.queue_extent(queue)):
        share = shares.get(number) or {}
        if (share.get("read_offset") or 0) <= start:
            share = {}  # all it read is gone (a purge, retention); it forgets them when it next reads
        not_visible += share.get("in_flight") or 0
        visible += share.get("available") or 0
        delayed += share.get("delayed") or 0
        unread_from = max(start, share.get("read_offset") or 0)
        if unread_from < end:
            later = await _delayed_between(client, queue, number, unread_from, end, now)
            visible += end - unread_from - later
            delayed += later
    return {"ApproximateNumberOfMessages": str(visible), "ApproximateNumberOfMessagesNotVisible": str(not_visible),
            "ApproximateNumberOfMessagesDelayed": str(delayed)}


_DELAY_SCAN_MAX = 20_000  # records looked at per partition for delivery times to come; past it, counted visible


async def _delayed_between(client, queue: QueueInfo, partition: int, first: int, end: int, now: int) -> int:
    """How many records in [first, end) of a partition the group has not read are due later than ``now``: only
    those published in the last 15 minutes (SQS's longest delay) or the queue's delay can be, so the look starts
    there, and it reads at most ``_DELAY_SCAN_MAX`` of them (as the platform's looks, not the tenant's reads)."""
    delay_ms = queue.delivery_delay_ms
    window_ms = max(MAX_DELAY_S * 1000, delay_ms)
    since, _ = await client.list_offset(queue.broker_topic, partition, now - window_ms)
    offset = max(first, since) if since >= 0 else end
    later = looked = 0
    while offset < end and looked < _DELAY_SCAN_MAX:
        result = await client.fetch(queue.broker_topic, partition, offset, max_bytes=1 << 20, retry_for_s=0,
                                    replica_id=INSPECTOR)
        if not result.records:
            break
        for position, _base, _size in readable_batches(result.records, result.aborted_transactions):
            for record in decode_records(result.records, position):
                if not offset <= record.offset < end:
                    continue
                offset, looked = record.offset + 1, looked + 1
                # The brokers' rule for when a record may be delivered (brokers/queues/window.py, ``add``).
                due = record.timestamp_ms + delay_ms if delay_ms else 0
                for name, value in record.headers or ():
                    if name == DEADLINE_HEADER and value and value.isdigit():
                        due = int(value)
                later += due > now
        offset = max(offset, _next_offset_of(result, offset))
    return later


def _next_offset_of(result, offset: int) -> int:
    """Past the last batch fetched (markers and aborted records take offsets too)."""
    for position, _base, _size in iter_batches(result.records):
        offset = max(offset, read_header(result.records, position).next_offset)
    return offset
