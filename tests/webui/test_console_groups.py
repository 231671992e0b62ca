"""The queue page's group table against a real broker: every group's lag from one LIST_GROUPS per broker,
furthest behind first, 50 per page, searchable; the console's own looks are not counted as the tenant's traffic."""

from __future__ import annotations

import asyncio
import json
import re
import time

import pytest

from tests.harness.console import signed_in
from tideway.native import Producer, TidewayClient
from tideway.native.group import CoordinatorLink, commit_offsets
from tideway.native.traffic import describe_traffic

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)

GROUPS = 120


def _rows(html: str) -> list[tuple[str, int]]:
    return [(name, int(lag)) for name, lag in re.findall(r'>(g-\d+)</a></td><td>stream</td><td>\d+</td><td data-lag="(\d+)"', html)]


def test_group_table_sorts_by_lag_pages_and_searches(client, owner_a, broker):
    from tideway_server.clusters.models import Cluster
    from tideway_server.topics.models import Queue

    user, tenant = owner_a
    topic = f"t{tenant.id}.busy"

    async def fill() -> None:
        async with TidewayClient(broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=2)
            async with Producer(admin, acks=1) as producer:
                for i in range(100):
                    await producer.send(topic, b"m%d" % i, partition=i % 2)
            for i in range(GROUPS):  # group g-i has consumed i % 100 of the 100 messages: lag 100 - i % 100
                done = i % 100
                await commit_offsets(CoordinatorLink(admin, f"t{tenant.id}.stream.g-{i:03d}"),
                                     {(topic, 0): min(done, 50), (topic, 1): max(0, done - 50)})

    asyncio.run(fill())
    cluster = Cluster.objects.create(name="local", bootstrap=broker.bootstrap)
    Queue.objects.create(tenant=tenant, cluster=cluster, name="busy", status="ready", broker_topic=topic, mode="stream",
                         partitions=2, replication_factor=1, retention_ms=86_400_000, retention_bytes=1 << 30,
                         max_message_bytes=1 << 20)
    signed_in(client, user)

    first = client.get("/console/queues/busy/groups", HTTP_HX_REQUEST="true")
    assert first.status_code == 200 and "did not answer" not in first.text, first.text[:500]
    rows = _rows(first.text)
    assert len(rows) == 50
    assert rows[:2] == [("g-000", 100), ("g-100", 100)] and rows[2] == ("g-001", 99)
    assert [lag for _name, lag in rows] == sorted((lag for _name, lag in rows), reverse=True)
    assert "120 groups" in first.text and "page 1 of 3" in first.text
    assert re.search(r'data-lag-seconds="\d+\.\d"', first.text)

    last = client.get("/console/queues/busy/groups", {"page": "3"}, HTTP_HX_REQUEST="true")
    assert len(_rows(last.text)) == 20 and _rows(last.text)[-1] == ("g-099", 1)
    beyond = client.get("/console/queues/busy/groups", {"page": "9"}, HTTP_HX_REQUEST="true")
    assert _rows(beyond.text) == _rows(last.text)  # past the end: the last page

    found = client.get("/console/queues/busy/groups", {"q": "G-01"}, HTTP_HX_REQUEST="true")
    assert {name for name, _lag in _rows(found.text)} == {f"g-{i:03d}" for i in range(10, 20)}
    assert "10 groups matching" in found.text

    one = client.get("/console/queues/busy/groups/g-055")  # consumed 55: 50 of partition 0, 5 of partition 1
    assert one.status_code == 200 and 'data-lag="45"' in one.text
    cells = re.findall(r"<tr><td>(\d)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td>", one.text)
    assert cells == [("0", "50", "50", "0"), ("1", "5", "50", "45")]  # partition, position, log end, lag
    assert "No member is connected" in one.text and "Preview the reset" in one.text
    # a reset shows where each position would go first (issue 43), and moves them only when confirmed
    preview = client.post("/console/queues/busy/groups/g-055/reset", {"to": "earliest"})
    assert preview.status_code == 200 and "Nothing has moved yet" in preview.text
    assert "re-reads 50 records" in preview.text and "re-reads 5 records" in preview.text
    assert 'data-lag="45"' in client.get("/console/queues/busy/groups/g-055").text  # unmoved
    ahead = client.post("/console/queues/busy/groups/g-055/reset", {"to": "offset", "offset": "40"})
    assert "re-reads 10 records" in ahead.text and "skips 35 records" in ahead.text
    # deleting an idle group (issue 43): asked first; then its positions are gone and the group with them
    ask = client.get("/console/queues/busy/groups/g-054/delete")
    assert ask.status_code == 200 and "cannot be undone" in ask.text
    assert client.post("/console/queues/busy/groups/g-054/delete", {"confirm": "g-05"}).status_code == 400
    gone = client.post("/console/queues/busy/groups/g-054/delete", {"confirm": "g-054"})
    assert gone.status_code == 302 and gone["Location"] == "/console/queues/busy?deleted_group=g-054"
    assert client.get("/console/queues/busy/groups/g-054").status_code == 404
    assert "119 groups" in client.get("/console/queues/busy/groups", HTTP_HX_REQUEST="true").text
    assert client.post("/console/queues/busy/groups/g-054/delete", {"confirm": "g-054"}).status_code == 404  # none left
    moved = client.post("/console/queues/busy/groups/g-055/reset", {"to": "earliest", "step": "apply"})
    assert moved.status_code == 200 and "positions were moved" in moved.text
    assert 'data-lag="100"' in client.get("/console/queues/busy/groups/g-055").text
    missing = client.get("/console/queues/busy/groups/nobody")
    assert missing.status_code == 404 and "group_not_found" in missing.text

    async def out() -> int:
        async with TidewayClient(broker.bootstrap) as admin:
            return (await describe_traffic(admin, [topic])).topics[topic][2]

    assert asyncio.run(out()) == 0  # the pages looked at records' times as an inspector: nobody consumed anything
    browsed = client.get("/console/queues/busy/messages", {"mode": "offset", "partition": "0", "offset": "0"})
    assert browsed.status_code == 200 and ">m0<" in browsed.text and ">m2<" in browsed.text
    # the queue list's figures (issue 43): messages stored now, and rates from the member's previous look
    listed = client.get("/console/queues")
    assert 'hx-get="/console/queue-figures?names=busy"' in listed.text
    first = client.get("/console/queue-figures", {"names": "busy,nope"}, HTTP_HX_REQUEST="true")
    assert 'id="fig-stored-1" hx-swap-oob="true" data-stored="100"' in first.text and "measuring" in first.text
    assert 'id="fig-stored-2" hx-swap-oob="true" data-stored=""' in first.text  # not the tenant's: nothing said
    time.sleep(1.1)
    second = client.get("/console/queue-figures", {"names": "busy"}, HTTP_HX_REQUEST="true")
    assert re.search(r'id="fig-in-1" hx-swap-oob="true">0\.0<', second.text) and "measuring" not in second.text
    assert 'id="detail-0-0"' in browsed.text and "&quot;value_as&quot;: &quot;text&quot;" in browsed.text  # its pane
    assert asyncio.run(out()) == 0  # browsing is a look too, not egress the tenant is billed for (issue 43)

    async def live_figures() -> list[dict]:
        from django.test import AsyncClient
        from tideway_server.webui import live

        browser = AsyncClient()
        await browser.aforce_login(user)
        answer = await browser.get("/console/queues/busy/counters")
        assert answer["Content-Type"] == "text/event-stream"
        events = answer.streaming_content.__aiter__()
        assert await anext(events) == b"retry: 1000\n\n"
        figures = [json.loads((await anext(events)).removeprefix(b"data: ")) for _ in range(2)]
        assert live._open[user.pk] == 1  # an open stream counts against the member's limit
        await events.aclose()
        answer.close()  # what Django does when a response ends, however it ends
        assert not live._open  # and it no longer counts
        return figures

    first, second = asyncio.run(live_figures())
    assert first["messages_in"] == 100 and first["bytes_in"] > 100 and first["missing_brokers"] == []
    assert 0.5 < second["t"] - first["t"] < 5  # one a second


def test_purging_a_queue_asks_for_its_name_then_deletes_every_message_and_says_how_many(client, owner_a, broker):
    from tideway_server.clusters.models import Cluster
    from tideway_server.tenants.actions import do_add_member
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.models import Queue

    from tests.harness.console import PASSWORD
    from tideway.protocol.messages import EARLIEST_TIMESTAMP

    user, tenant = owner_a
    topic = f"t{tenant.id}.jobs"

    async def fill() -> None:
        async with TidewayClient(broker.bootstrap) as admin:
            await admin.create_topic(topic, partitions=2)
            async with Producer(admin, acks=1) as producer:
                for i in range(14):
                    await producer.send(topic, b"m%d" % i, partition=i % 2)

    async def starts() -> list[int]:
        async with TidewayClient(broker.bootstrap) as admin:
            return [(await admin.list_offset(topic, p, EARLIEST_TIMESTAMP))[0] for p in (0, 1)]

    asyncio.run(fill())
    cluster = Cluster.objects.create(name="local", bootstrap=broker.bootstrap)
    Queue.objects.create(tenant=tenant, cluster=cluster, name="jobs", status="ready", broker_topic=topic, mode="queue",
                         partitions=2, replication_factor=1, retention_ms=86_400_000, retention_bytes=1 << 30,
                         max_message_bytes=1 << 20)
    signed_in(client, user)
    assert 'href="/console/queues/jobs/purge"' in client.get("/console/queues/jobs").content.decode()
    asked = client.get("/console/queues/jobs/purge").content.decode()
    assert "cannot be undone" in asked and "Purge messages" in asked
    wrong = client.post("/console/queues/jobs/purge", {"confirm": "job"})
    assert wrong.status_code == 400 and "type the queue&#x27;s name (jobs)" in wrong.content.decode()
    assert asyncio.run(starts()) == [0, 0]  # nothing deleted

    done = client.post("/console/queues/jobs/purge", {"confirm": "jobs"})
    assert done.status_code == 302 and done["Location"] == "/console/queues/jobs?purged=14"
    assert "Purged: 14 messages deleted from jobs." in client.get(done["Location"]).content.decode()
    assert asyncio.run(starts()) == [7, 7]
    assert AuditEntry.objects.filter(tenant=tenant, action="queue.purge", target="jobs", details__purged=14).exists()

    viewer = do_add_member(tenant, username="vera", role="viewer", password=PASSWORD, acting="test").user
    signed_in(client, viewer)
    assert "/purge" not in client.get("/console/queues/jobs").content.decode()
    assert client.post("/console/queues/jobs/purge", {"confirm": "jobs"}).status_code == 403
