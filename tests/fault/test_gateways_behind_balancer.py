"""Two gateways behind HAProxy, as `tideway up --gateways 2` runs them (issue 45).

Gateways keep nothing a client's next request needs (tideway_server/cli/balancer.py says why), so: a dedup id
stored through one gateway is a duplicate through the other, the tenant's rate limit is one limit over both, a
browser token obtained from one works on the other; and a gateway SIGKILLed under REST publishing and WebSocket
consumption through the balancer loses no acknowledged publish, while its subscribers reconnect through the
balancer to the gateway left and go on receiving (what they had not acknowledged comes back).
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest
import websockets

from tests.harness.control_plane import running_control_plane
from tests.harness.gateway import PublishAndSubscribe

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    home = tmp_path_factory.mktemp("balanced")
    with running_control_plane(home, f"sqlite://{home}/control.sqlite3", gateways=2) as running:
        yield running


def _direct(plane, index: int, key: str) -> httpx.Client:
    """A client of gateway ``index`` itself, not of the balancer."""
    _, port = plane.gateways[index]
    return httpx.Client(base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {key}"}, timeout=60)


def test_dedup_windows_rate_limits_and_tokens_hold_across_gateways(plane):
    _, key = plane.create_tenant(plan="free")  # 1 MiB/s published
    with plane.client(key) as api:
        assert api.post("/api/v1/queues/", json={"name": "shared", "partitions": 1, "replication_factor": 3}).status_code == 201
    url = "/api/v1/queues/shared/messages"
    with _direct(plane, 0, key) as first, _direct(plane, 1, key) as second:
        # A dedup id stored through one gateway is a duplicate through the other.
        assert first.post(url, json={"messages": [{"value": "paid", "dedup_id": "payment-1"}]}).status_code == 200
        again = second.post(url, json={"messages": [{"value": "paid", "dedup_id": "payment-1"}]})
        assert again.status_code == 409 and again.json()["code"] == "duplicate_message", again.text

        # One rate limit over both: a second of the plan's publish bytes through one, then the other refuses.
        big = [{"value": "x" * 250_000}] * 5
        assert first.post(url, json={"messages": big}).status_code == 200
        refused = second.post(url, json={"messages": big})
        assert refused.status_code == 429 and refused.json()["details"]["limit"] == "publish_bytes", refused.text

        # A browser token from one gateway works on the other (HTTP and WebSocket).
        issued = first.post("/api/v1/tokens", json={"ttl_seconds": 300, "scopes": ["consume"], "queues": ["shared"]})
        assert issued.status_code in (200, 201), issued.text
        token = issued.json()["token"]
        _, port = plane.gateways[1]
        peeked = httpx.get(f"http://127.0.0.1:{port}{url}", params={"from": "earliest", "token": token}, timeout=30)
        assert peeked.status_code == 200 and peeked.json()["messages"][0]["value"] == "paid", peeked.text

        async def subscribe_with_token() -> str:
            async with websockets.connect(f"ws://127.0.0.1:{port}/ws/v1/queues/shared?token={token}", open_timeout=10) as ws:
                await ws.send(json.dumps({"type": "subscribe", "group": "token-readers", "prefetch": 5}))
                while (kind := json.loads(await asyncio.wait_for(ws.recv(), 10))["type"]) == "ready":
                    pass
                return kind

        assert asyncio.run(subscribe_with_token()) == "subscribed"


async def test_a_gateway_killed_under_publishing_and_websocket_consumption_loses_nothing(plane):
    _, key = plane.create_tenant(plan="team")
    with plane.client(key) as api:
        created = api.post("/api/v1/queues/", json={"name": "orders", "partitions": 3, "replication_factor": 3,
                                                     "visibility_timeout_ms": 3000, "max_deliveries": 100})
        assert created.status_code == 201, created.text
    load = PublishAndSubscribe(plane.base_url, key, "orders", subscribers=4, publishers=3)
    load.start()
    await asyncio.sleep(3)
    acked_before = len(load.acked)
    plane.kill_gateway(0)
    # Publishing goes on through the gateway left. A publisher whose batch was in flight on the killed gateway waits
    # until that gateway's reservation of the batch's dedup ids lapses (limits.PENDING_S, 30 s: the safe bound, as
    # nobody can tell whether the brokers stored it), then stores it or learns it was stored; the others go on now.
    deadline = time.monotonic() + 45
    while len(load.acked) < acked_before + 200 and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    await asyncio.sleep(3)
    await load.stop()
    assert acked_before > 100 and len(load.acked) >= acked_before + 200, (acked_before, len(load.acked))
    # leastconn spread the four subscribers over both gateways: those on the killed one came back through the
    # balancer (to the other) and were pushed messages again.
    reconnected = [i for i, count in enumerate(load.connections) if count > 1]
    assert reconnected, f"no subscriber was on the killed gateway: {load.connections}"
    assert all(load.pushed_after_reconnect[i] > 0 for i in reconnected), (load.connections, load.pushed_after_reconnect)
    assert await load.check(partitions=3) == []
