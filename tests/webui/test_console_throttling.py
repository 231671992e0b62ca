"""Throttling made visible (issue 20): the dashboard's rate-limit table and the ``throttled`` alert metric, read from
the counts the gateway's limiter keeps in Redis (a real redis-server of the test's own)."""

from __future__ import annotations

import asyncio

import pytest

from tests.harness.console import signed_in
from tests.harness.processes import RedisProcess

pytestmark = pytest.mark.django_db


@pytest.fixture
def redis_url(tmp_path, settings):
    server = RedisProcess(tmp_path / "redis")
    settings.TIDEWAY_REDIS_URL = server.url
    yield server.url
    server.stop()


def _throttle(tenant, times: int, **charge) -> int:
    """Take from the tenant's buckets until refused ``times`` times, as the gateway does; how many calls passed."""
    from tideway_server.gateway import limits
    from tideway_server.gateway.auth import Limits
    from tideway_server.gateway.errors import GatewayError

    class Caller:
        tenant_id = tenant.pk
        limits = Limits(1, 1, 1, 1 << 20)  # one request, one byte a second

    async def run() -> int:
        refused = passed = 0
        limits._leases.clear()
        while refused < times:
            try:
                await limits.take(Caller, **charge)
                passed += 1
            except GatewayError as exc:
                assert exc.code == "throttled"
                refused += 1
        for connection in limits._connections.values():
            await connection.aclose()
        limits._connections.clear()
        limits._scripts.clear()
        return passed

    return asyncio.run(run())


def test_the_dashboard_shows_how_often_each_limit_held_the_tenant_back(client, owner_a, owner_b, redis_url):
    user, tenant = owner_a
    _throttle(tenant, 3)  # requests only
    _throttle(tenant, 2, requests=0, consume_bytes=10, consuming=True)
    _throttle(owner_b[1], 7)  # another tenant's count is not shown
    signed_in(client, user)
    assert b'hx-get="/console/throttling"' in client.get("/console/").content
    table = client.get("/console/throttling", HTTP_HX_REQUEST="true")
    assert table.status_code == 200
    rows = table.content.decode()
    # The plan's own rates (the free plan), and the counts of this tenant only.
    assert "<td>requests</td><td>50 requests/s</td><td>3</td>\n      <td>3</td><td>3</td>" in rows
    assert "<td>publish_bytes</td><td>1 MiB/s published</td><td>0</td>\n      <td>0</td><td>0</td>" in rows
    assert "<td>consume_bytes</td><td>2 MiB/s consumed</td><td>2</td>\n      <td>2</td><td>2</td>" in rows


def test_a_throttled_rule_reads_the_tenant_s_recent_refusals(owner_a, redis_url):
    from tideway_server.alerts.evaluate import Scope, rule_value
    from tideway_server.alerts.inputs import recent_throttling
    from tideway_server.alerts.models import AlertRule

    _user, tenant = owner_a
    _throttle(tenant, 4)
    assert recent_throttling([tenant.pk]) == {tenant.pk: 4.0}
    rule = AlertRule(tenant=tenant, metric="throttled", comparator=">", threshold=0)
    assert rule_value(rule, Scope({}), 0, 60_000, throttled=lambda: recent_throttling([tenant.pk])[tenant.pk]) == 4.0
