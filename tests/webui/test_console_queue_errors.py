"""The queue forms never answer 500 (issue 43): a quota, a replication factor the cluster cannot hold and a cluster
that refuses are form errors beside their fields, in words, with what was typed kept; nothing is created and no
audit entry is written for a queue that never existed."""

from __future__ import annotations

import pytest

from tests.harness.console import make_queue, signed_in
from tideway.protocol import errors

pytestmark = pytest.mark.django_db


@pytest.fixture
def three_brokers(cluster):
    from tideway_server.clusters.models import Broker

    for i in (1, 2, 3):
        Broker.objects.create(cluster=cluster, broker_id=i, host="127.0.0.1", port=9400 + i, state="alive")
    return cluster


def _nothing_created(tenant) -> bool:
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.models import Queue

    return not Queue.objects.filter(tenant=tenant).exists() and not AuditEntry.objects.filter(
        tenant=tenant, action__startswith="queue.").exists()


def test_a_create_past_the_plans_quotas_is_a_form_error_in_words(client, owner_a, three_brokers):
    user, tenant = owner_a  # the free plan: 10 partitions, 7 days
    signed_in(client, user)
    too_many = client.post("/console/create-queue", {"name": "orders", "mode": "stream", "partitions": "50",
                                                     "replication_factor": "3"})
    assert too_many.status_code == 400
    assert "the free plan allows 10 partitions in all" in too_many.text
    assert 'value="orders"' in too_many.text and 'value="50"' in too_many.text  # what was typed is kept
    too_long = client.post("/console/create-queue", {"name": "orders", "mode": "stream", "partitions": "1",
                                                    "replication_factor": "3", "retention_ms": str(30 * 86_400_000)})
    assert too_long.status_code == 400
    assert "the free plan keeps messages up to 7 days; 30 days was asked" in too_long.text
    assert _nothing_created(tenant)


def test_more_replicas_than_brokers_is_a_form_error_beside_the_field(client, owner_a, three_brokers):
    user, tenant = owner_a
    signed_in(client, user)
    answer = client.post("/console/create-queue", {"name": "orders", "mode": "stream", "partitions": "1",
                                                   "replication_factor": "5"})
    assert answer.status_code == 400 and "the cluster has 3 brokers: at most 3 replicas" in answer.text
    assert _nothing_created(tenant)


def test_a_cluster_that_refuses_is_a_form_error_and_leaves_no_audit_entry(client, owner_a, three_brokers, monkeypatch):
    from tideway_server.clusters import admin

    def refuse(*args, **kwargs):
        raise errors.InvalidReplicationFactorError("only 2 brokers are alive")

    monkeypatch.setattr(admin, "create_topic", refuse)
    monkeypatch.setattr(admin, "delete_topic", lambda *a, **k: None)
    user, tenant = owner_a
    signed_in(client, user)
    answer = client.post("/console/create-queue", {"name": "orders", "mode": "stream", "partitions": "1",
                                                   "replication_factor": "3"})
    assert answer.status_code == 400
    assert "the broker cluster refused the change: only 2 brokers are alive" in answer.text
    assert _nothing_created(tenant)


def test_an_edit_past_the_plans_retention_is_a_form_error_and_changes_nothing(client, owner_a, cluster):
    from tideway_server.topics.models import Queue

    user, tenant = owner_a
    queue = make_queue(tenant, cluster, "orders", partitions=2, status="ready")
    queue.max_message_bytes = 256 * 1024  # within the free plan, as a queue it created would be
    queue.save()
    signed_in(client, user)
    answer = client.post("/console/queues/orders/edit", {"retention_ms": str(30 * 86_400_000), "schema_subject": ""})
    assert answer.status_code == 400
    assert "the free plan keeps messages up to 7 days; 30 days was asked" in answer.text
    assert Queue.objects.get(name="orders").retention_ms == 86_400_000


def test_the_throughput_chart_covers_a_day_or_a_month_from_the_usage_rollups(client, owner_a, cluster):
    """The chart covered two minutes from the page's load (issue 43): a range picker reads the usage job's
    rollups of the queue for the last 24 hours (by hour) or 30 days (by day), every bucket shown."""
    import json
    from datetime import UTC, datetime, timedelta

    from tideway_server.billing.models import UsageRollup

    from tests.harness.console import make_queue

    user, tenant = owner_a
    make_queue(tenant, cluster, "orders")
    hour = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    for start, value in ((hour, 40), (hour - timedelta(hours=3), 2), (hour - timedelta(hours=30), 999)):
        UsageRollup.objects.create(tenant=tenant, period=start.strftime("%Y-%m"), granularity="hour", start=start,
                                   queue="orders", metric="messages_in", value=value)
    UsageRollup.objects.create(tenant=tenant, period=hour.strftime("%Y-%m"), granularity="hour", start=hour,
                               queue="other", metric="messages_in", value=5)  # another queue's
    signed_in(client, user)
    live = client.get("/console/queues/orders").content.decode()
    assert "data-live=" in live and "throughput-history" not in live
    day = client.get("/console/queues/orders", {"range": "day"}).content.decode()
    figures = json.loads(day.split('<script id="throughput-history" type="application/json">')[1].split("</script>")[0])
    assert len(figures["t"]) == 24 and figures["unit"] == "/ hour" and figures["span"] == 86400
    assert figures["messages_in"][-1] == 40 and figures["messages_in"][-4] == 2 and sum(figures["messages_in"]) == 42
    assert figures["t"][-1] == int(hour.timestamp()) and '<option value="day" selected>' in day
    month = client.get("/console/queues/orders", {"range": "month"}).content.decode()
    assert '"unit": "/ day"' in month and "data-history=" in month
    assert "data-live=" in client.get("/console/queues/orders", {"range": "year"}).content.decode()  # unknown: live
