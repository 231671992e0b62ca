"""The Python SDK against real processes: sync and async clients, WebSocket subscriptions, retries."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

import tideway
from tests.harness.gateway import make_queue


def test_sync_client_publishes_receives_and_acks(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    with tideway.Client(gateway.base_url, key) as client:
        jobs = client.queue(name)
        placed = jobs.publish(["one", b"\xff\x00binary", {"value": "three", "key": "k", "headers": {"h": "v"}}])
        assert len(placed) == 3 and all(p["offset"] >= 0 for p in placed)
        got = []
        while len(got) < 3:
            batch = jobs.receive("workers", max_messages=10, wait_seconds=2)
            assert batch
            got += batch
        assert sorted(m.value for m in got) == sorted([b"one", b"\xff\x00binary", b"three"])
        for message in got:
            message.ack()
        assert jobs.receive("workers", wait_seconds=1) == []
        with pytest.raises(tideway.ApiError) as refused:
            client.queue("no-such-queue").publish(["x"])
        assert refused.value.status == 404 and refused.value.code == "queue_not_found"


async def test_async_subscription_over_websocket(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    async with tideway.AsyncClient(gateway.base_url, key) as client:
        queue = client.queue(name)
        await queue.publish([f"event-{i}" for i in range(30)])
        seen = []

        async def consume():
            async for message in queue.subscribe("listeners", prefetch=5):
                seen.append(message.text)
                await message.ack()
                if len(seen) == 30:
                    return

        await asyncio.wait_for(consume(), 30)
        assert sorted(seen) == sorted(f"event-{i}" for i in range(30))


def test_publish_retries_through_a_gateway_restart_and_throttling(gateway, caplog):
    caplog.set_level("INFO", logger="tideway")
    _, key = gateway.create_tenant(plan="free")  # 50 requests/s
    name = make_queue(gateway, key, partitions=1, replication_factor=1)
    with tideway.Client(gateway.base_url, key, backoff_seconds=0.1) as client:
        queue = client.queue(name)
        gateway.kill_server()
        restart = threading.Timer(1.5, gateway.start_server)
        restart.start()
        started = time.monotonic()
        placed = queue.publish(["survives a restart"])  # connection refused, retried until the server is back
        restart.join()
        assert placed[0]["offset"] == 0 and time.monotonic() - started >= 1.0
        # 120 one-message publishes from 6 threads exceed 50 requests/s: the SDK waits out every 429.
        def burst(i):
            return queue.publish([f"burst-{i}"])

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(6) as pool:
            results = list(pool.map(burst, range(120)))
        assert len(results) == 120
        assert any("429 throttled" in r.getMessage() for r in caplog.records), "the burst was throttled and retried"
        assert any("failed" in r.getMessage() for r in caplog.records), "the restart was retried"
        stored = [m.text for m in queue.peek(1000)]
        assert stored.count("survives a restart") == 1
        assert sorted(v for v in stored if v.startswith("burst-")) == sorted(f"burst-{i}" for i in range(120))
