"""Crash the ASGI server, then a broker, in the middle of a stream of REST publishes and WebSocket deliveries:
no acknowledged publish is lost, and deliveries that were never acknowledged come back."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.control_plane import running_control_plane
from tests.harness.gateway import PublishAndSubscribe


@pytest.fixture
def plane(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as running:
        yield running


async def test_killing_the_gateway_then_a_broker_loses_no_acknowledged_publish(plane):
    _, key = plane.create_tenant(plan="team")
    with plane.client(key) as api:
        created = api.post("/api/v1/queues/", json={"name": "orders", "partitions": 3, "replication_factor": 3,
                                                     "visibility_timeout_ms": 3000, "max_deliveries": 100})
        assert created.status_code == 201, created.text
    load = PublishAndSubscribe(plane.base_url, key, "orders")
    load.start()
    await asyncio.sleep(2)
    plane.kill_server()
    await asyncio.sleep(1)
    await asyncio.to_thread(plane.start_server)
    await asyncio.sleep(2)
    plane.deployment.brokers[2].kill()
    await asyncio.sleep(4)
    await load.stop()
    assert len(load.acked) > 200 and load.kept
    # Every acknowledged publish is there, and every delivery that was never acked came back.
    assert await load.check(partitions=3) == []
