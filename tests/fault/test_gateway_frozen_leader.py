"""The gateway's pool re-routes around a frozen leader (issue 40).

Rule: REST publishes go on being acknowledged while a partition's leader is frozen (SIGSTOP: its sockets stay
open, it answers nothing): no publish waits longer than the broker session timeout plus 3 s, none fails, and every
acknowledged message is stored once. Before, the gateway's producer waited out the freeze.

Real processes: a controller, three brokers, Redis, a Celery worker and `tideway serve`; a tenant publishes batches
of 12 keyed messages (every partition each time) to a 3-partition queue, one request at a time.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.fault.test_frozen_leader import freeze
from tests.fault.test_idempotent_failover import longest_silence_s
from tests.harness.control_plane import running_control_plane
from tideway.native import Consumer, TidewayClient

pytestmark = pytest.mark.timeout(300)

SESSION_TIMEOUT_S = 3  # running_control_plane's --broker-session-timeout-ms


@pytest.fixture
def plane(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as running:
        yield running


async def test_rest_publishes_go_on_while_a_leader_is_frozen(plane):
    _, key = plane.create_tenant(plan="team")
    with plane.client(key) as api:
        created = api.post("/api/v1/queues/", json={"name": "orders", "partitions": 3, "replication_factor": 3,
                                                     "mode": "stream"})
        assert created.status_code == 201, created.text
    acked: list[str] = []
    answered_at: list[float] = []
    failures: list[str] = []
    stop = asyncio.Event()

    async def publish() -> None:
        number = 0
        async with httpx.AsyncClient(base_url=plane.base_url, headers={"Authorization": f"Bearer {key}"},
                                     timeout=60) as http:
            while not stop.is_set():
                values = [f"m{number}-{i}" for i in range(12)]
                number += 1
                answer = await http.post("/api/v1/queues/orders/messages",
                                         json={"messages": [{"value": v, "key": f"k{i}"} for i, v in enumerate(values)]})
                if answer.status_code == 200:
                    acked.extend(values)
                    answered_at.append(time.monotonic())
                else:
                    failures.append(f"{answer.status_code} {answer.text[:200]}")
                await asyncio.sleep(0.02)

    publisher = asyncio.ensure_future(publish())
    await asyncio.sleep(3)
    state = await plane.deployment.describe()
    topic = next(p.topic for p in state.partitions if p.topic.endswith(".orders"))
    started, ended = await freeze(plane.deployment.brokers[plane.deployment.partition(state, topic, 0).leader])
    stop.set()
    await publisher

    assert failures == [], failures[:3]
    longest = longest_silence_s({0: answered_at}, started, ended)
    assert longest <= SESSION_TIMEOUT_S + 3, f"no publish was answered for {longest:.1f} s"

    from tests.harness.processes import OPERATOR_KEY

    async with TidewayClient(plane.deployment.bootstrap, api_key=OPERATOR_KEY) as client:
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([(topic, p) for p in range(3)], start="earliest")
        stored: list[str] = []
        deadline = time.monotonic() + 30
        while len(stored) < len(acked) and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                stored += [r.value.decode() for r in records]
        await consumer.stop()
    assert set(acked) <= set(stored), f"{len(set(acked) - set(stored))} acknowledged messages missing"
    assert len(stored) == len(set(stored)), "a message was stored twice"
