"""Reading ``__usage`` as the billing job does (the rules of brokers/server/usage.py), for tests."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable

from tideway_server.brokers.usage_topic import USAGE_TOPIC

from tideway.native import Consumer, TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m


async def read_usage(client: TidewayClient) -> list[dict]:
    """Every record in ``__usage`` now, decoded (duplicates included)."""
    out = []
    try:
        infos = await client.partitions_for(USAGE_TOPIC)
    except errors.UnknownTopicOrPartitionError:
        return []  # no broker has flushed yet
    for info in infos:
        end, _ = await client.list_offset(USAGE_TOPIC, info.partition, m.LATEST_TIMESTAMP)
        if end == 0:
            continue
        consumer = Consumer(client, auto_offset_reset="earliest", fetch_max_wait_ms=100)
        await consumer.start()
        try:
            await consumer.assign([(USAGE_TOPIC, info.partition)], start="earliest")
            while consumer.position((USAGE_TOPIC, info.partition)) < end:
                for records in (await consumer.getmany(timeout_ms=1000)).values():
                    out += [json.loads(r.value) for r in records]
        finally:
            await consumer.stop()
    return out


def totals(records: list[dict], topic: str) -> dict[str, int]:
    """Usage of ``topic``: records deduplicated by id; ingress ranges contained in another dropped."""
    unique = {r["id"]: r for r in records}.values()
    ranges: dict[int, set[tuple[int, int, int, int]]] = {}
    out = {"messages_in": 0, "bytes_in": 0, "messages_out": 0, "bytes_out": 0}
    gateway = {"gateway_requests": 0, "gateway_bytes_in": 0, "gateway_bytes_out": 0}
    for record in unique:
        for t, partition, start, end, messages, size in record["ingress"]:
            if t == topic:
                ranges.setdefault(partition, set()).add((start, end, messages, size))
        for t, messages, size in record["egress"]:
            if t == topic:
                out["messages_out"] += messages
                out["bytes_out"] += size
        for t, requests, bytes_in, bytes_out in record.get("gateway", []):
            if t == topic:
                gateway["gateway_requests"] += requests
                gateway["gateway_bytes_in"] += bytes_in
                gateway["gateway_bytes_out"] += bytes_out
    for kept in ranges.values():
        for start, end, messages, size in kept:
            if not any(s <= start and end <= e and (s, e) != (start, end) for s, e, _m, _b in kept):
                out["messages_in"] += messages
                out["bytes_in"] += size
    if any(gateway.values()):
        out.update(gateway)
    return out


def usage_of_queue(bootstrap: str, name: str, done: Callable[[dict], bool], timeout_s: float = 20) -> dict:
    """The usage metered to a tenant's queue ``name`` (the broker topic ending in ``.name``), read again until
    ``done(usage)`` holds or ``timeout_s`` passes: the gateways and the brokers flush on their own clocks."""
    from tests.harness.processes import OPERATOR_KEY

    async def read() -> dict:
        async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
            topic = next(t for t in await client.list_topics() if t.endswith(f".{name}"))
            deadline = time.monotonic() + timeout_s
            while True:
                got = totals(await read_usage(client), topic)
                if done(got) or time.monotonic() > deadline:
                    return got
                await asyncio.sleep(0.2)

    return asyncio.run(read())
