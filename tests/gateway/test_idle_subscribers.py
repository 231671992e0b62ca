"""A thousand idle WebSocket subscribers cost the brokers next to nothing, and share what comes (issue 20).

Before, each subscriber long-polled the brokers with receives of its own, and a waiting receive
woke every 100 ms on the broker and fetched from the other leaders: 10 idle subscribers made the
brokers answer about 433 fetches a second (13,000 in 30 s). The subscribers of one group now share
the gateway's receives, and a waiting receive sleeps until records may be there.
"""

from __future__ import annotations

import asyncio
import re
import resource

import httpx
import pytest

from tests.harness.control_plane import running_control_plane
from tests.harness.gateway import close_all, pushed_values, subscribe_many

pytestmark = pytest.mark.timeout(600)

SUBSCRIBERS = 1_000
IDLE_S = 30
REQUESTS_OF_10_BEFORE = 13_000  # 10 idle subscribers for 30 s, before (the measurement: 433 fetches/s)
_COUNT = re.compile(r'^tideway_request_latency_seconds_count\{api="(\w+)"\} ([0-9.e+]+)$', re.M)


def _requests(plane) -> dict[str, float]:
    """Requests the brokers have answered so far, by API (summed over the brokers)."""
    out: dict[str, float] = {}
    for url in plane.broker_metrics:
        for api, count in _COUNT.findall(httpx.get(url, timeout=10).text):
            out[api] = out.get(api, 0) + float(count)
    return out


@pytest.fixture(scope="module")
def plane(tmp_path_factory):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = 4 * SUBSCRIBERS + 1_000  # the test's sockets and the gateway's (it inherits the limit)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted if hard == resource.RLIM_INFINITY else min(wanted, hard), hard))
    home = tmp_path_factory.mktemp("idle")
    try:
        with running_control_plane(home, f"sqlite://{home}/control.sqlite3", broker_metrics=True) as plane:
            yield plane
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def test_a_thousand_idle_subscribers_cost_fewer_requests_than_ten_did_and_all_get_a_share(plane):
    _, key = plane.create_tenant(plan="business")
    with plane.client(key) as api:
        answer = api.post("/api/v1/queues/", json={"name": "idle", "partitions": 3, "replication_factor": 3})
        assert answer.status_code == 201, answer.text
    url = plane.base_url.replace("http://", "ws://") + "/ws/v1/queues/idle"
    headers = {"Authorization": f"Bearer {key}"}
    sockets = await subscribe_many(url, headers, SUBSCRIBERS, group="idle")
    try:
        await asyncio.sleep(2)
        before = _requests(plane)
        await asyncio.sleep(IDLE_S)
        after = _requests(plane)
        asked = {api: after[api] - before.get(api, 0) for api in after if after[api] > before.get(api, 0)}
        assert sum(asked.values()) < REQUESTS_OF_10_BEFORE, asked

        with plane.client(key) as api:
            for batch in range(10):
                answer = api.post("/api/v1/queues/idle/messages",
                                  json={"messages": [{"value": f"m{batch}-{i}"} for i in range(100)]})
                assert answer.status_code == 200, answer.text
        got = await pushed_values(sockets)
        values = sorted(v for held in got for v in held)
        assert values == sorted(f"m{b}-{i}" for b in range(10) for i in range(100))  # each once
        counts = sorted(len(held) for held in got)
        assert counts[0] >= 1 and counts[-1] <= 10, (counts[:5], counts[-5:])  # nobody without, nobody over prefetch
        # A business-plan tenant is not throttled by its own subscriber count: they share the group's receives.
        with plane.client(key) as api:
            assert api.get("/api/v1/tenant").json()["throttled"]["last_hour"] == {
                "requests": 0, "publish_bytes": 0, "consume_bytes": 0}
    finally:
        await close_all(sockets)
