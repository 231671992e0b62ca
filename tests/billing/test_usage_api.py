"""GET /api/v1/usage over the job's rollups: buckets, grouping, validation, tenant isolation."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.harness.console import signup

pytestmark = pytest.mark.django_db


def _key(tenant) -> str:
    from tideway_server.tenants.actions import do_create_api_key

    return do_create_api_key(tenant, name="usage", scopes=["consume"], acting="test")[1]


def _rollups(tenant) -> None:
    from tideway_server.billing.models import UsageRollup

    rows = []
    for hour, queue, metric, value in [(1, "orders", "messages_in", 10), (1, "orders", "bytes_in", 1000),
                                       (2, "orders", "messages_in", 5), (2, "payments", "messages_in", 7),
                                       (2, "", "requests", 3)]:
        rows.append(UsageRollup(tenant=tenant, period="2026-11", granularity="hour", queue=queue, metric=metric, value=value,
                                start=datetime(2026, 11, 3, hour, tzinfo=UTC)))
    for queue, metric, value in [("orders", "messages_in", 15), ("orders", "bytes_in", 1000), ("payments", "messages_in", 7),
                                 ("", "requests", 3)]:
        rows.append(UsageRollup(tenant=tenant, period="2026-11", granularity="day", queue=queue, metric=metric, value=value,
                                start=datetime(2026, 11, 3, tzinfo=UTC)))
    UsageRollup.objects.bulk_create(rows)


def test_usage_by_day_and_by_hour_per_metric_or_queue(client):
    _user, tenant = signup("uma")
    _rollups(tenant)
    auth = {"HTTP_AUTHORIZATION": f"Bearer {_key(tenant)}"}
    days = client.get("/api/v1/usage", {"from": "2026-11-01", "to": "2026-12-01"}, **auth).json()
    assert days["totals"] == {"messages_in": 22, "bytes_in": 1000, "requests": 3}
    assert days["series"] == [
        {"start": "2026-11-03T00:00:00Z", "metric": "bytes_in", "value": 1000, "unit": "bytes"},
        {"start": "2026-11-03T00:00:00Z", "metric": "messages_in", "value": 22, "unit": "messages"},
        {"start": "2026-11-03T00:00:00Z", "metric": "requests", "value": 3, "unit": "requests"}]
    hours = client.get("/api/v1/usage", {"from": "2026-11-03T02:00Z", "to": "2026-11-03T03:00Z", "granularity": "hour",
                                         "group_by": "queue"}, **auth).json()
    assert [(s["queue"], s["metric"], s["value"]) for s in hours["series"]] == [
        ("orders", "messages_in", 5), ("payments", "messages_in", 7), ("", "requests", 3)]


def test_bad_parameters_get_the_one_error_shape_and_tenants_see_only_their_own(client):
    _user, tenant = signup("vera")
    _rollups(tenant)
    _other, stranger = signup("walt")
    mine = {"HTTP_AUTHORIZATION": f"Bearer {_key(tenant)}"}
    for params, field in [({"granularity": "minute"}, "granularity"), ({"group_by": "colour"}, "group_by"),
                          ({"from": "yesterday"}, "from"), ({"from": "2026-11-05", "to": "2026-11-01"}, "to"),
                          ({"from": "2026-01-01", "to": "2026-12-01", "granularity": "hour"}, "granularity")]:
        answer = client.get("/api/v1/usage", params, **mine)
        assert answer.status_code == 400 and answer.json()["code"] == "invalid_request", (params, answer.content)
        assert field in answer.json()["message"] or answer.json().get("details", {}).get("field") == field
    theirs = client.get("/api/v1/usage", {"from": "2026-11-01", "to": "2026-12-01"},
                        HTTP_AUTHORIZATION=f"Bearer {_key(stranger)}").json()
    assert theirs["series"] == [] and theirs["totals"] == {}
    assert client.get("/api/v1/usage").status_code == 401
