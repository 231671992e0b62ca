"""The console's transactions page and the hung-transaction alert metric against a real broker (issue 44): a
tenant sees its own transactional ids (open ones first, by its own names, never another tenant's), a manager
aborts an open one after typing its name, and ``oldest_transaction_seconds`` fires while one stays open."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness.console import signed_in
from tideway.native import TidewayClient, TransactionalProducer
from tideway.native.transactions import describe_transaction

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


async def _transaction(bootstrap: str, transactional_id: str, topic: str, *, commit: bool) -> None:
    """One transaction of ``transactional_id`` writing to ``topic``: committed, or left open (its producer goes
    away; the coordinator keeps it open until its timeout)."""
    async with TidewayClient(bootstrap) as client:
        producer = TransactionalProducer(client, transactional_id, linger_ms=1, transaction_timeout_ms=120_000)
        await producer.start()
        producer.begin()
        await (await producer.send(topic, b"written", partition=0))
        if commit:
            await producer.commit()
        await producer.stop()


async def _state(bootstrap: str, transactional_id: str) -> str:
    async with TidewayClient(bootstrap) as client:
        return (await describe_transaction(client, transactional_id)).state


def test_the_transactions_page_lists_the_tenants_own_and_a_manager_aborts_one(client, owner_a, owner_b, broker):
    from tideway_server.alerts.evaluate import evaluate_all
    from tideway_server.alerts.inputs import oldest_open_transactions
    from tideway_server.alerts.models import AlertRule
    from tideway_server.clusters.models import Cluster
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.models import Queue

    user, tenant = owner_a
    _, other = owner_b
    cluster = Cluster.objects.create(name="local", bootstrap=broker.bootstrap)
    for owner, name in ((tenant, "ledger"), (other, "secrets")):
        topic = f"t{owner.id}.{name}"

        async def create(topic=topic) -> None:
            async with TidewayClient(broker.bootstrap) as admin:
                await admin.create_topic(topic, partitions=1)

        asyncio.run(create())
        Queue.objects.create(tenant=owner, cluster=cluster, name=name, status="ready", broker_topic=topic,
                             mode="stream", partitions=1, replication_factor=1, retention_ms=86_400_000,
                             retention_bytes=1 << 30, max_message_bytes=1 << 20)
    asyncio.run(_transaction(broker.bootstrap, f"t{tenant.id}.txn.settled", f"t{tenant.id}.ledger", commit=True))
    asyncio.run(_transaction(broker.bootstrap, f"t{tenant.id}.txn.enricher", f"t{tenant.id}.ledger", commit=False))
    asyncio.run(_transaction(broker.bootstrap, f"t{other.id}.txn.bobs-enricher", f"t{other.id}.secrets", commit=False))

    rule = AlertRule.objects.create(tenant=tenant, name="hung", metric="oldest_transaction_seconds", comparator=">",
                                    threshold=1, recovery_threshold=1)
    ages = oldest_open_transactions([tenant.id])
    while ages[tenant.id] <= 1:  # (it grows: open for more than a second)
        time.sleep(0.2)
        ages = oldest_open_transactions([tenant.id])
    evaluate_all({}, stale_ms=60_000, oldest_transactions=ages)
    rule.refresh_from_db()
    assert (rule.state, rule.last_value > 1) == ("FIRING", True), (rule.state, rule.last_value)

    signed_in(client, user)
    assert 'href="/console/transactions"' in client.get("/console/").content.decode()
    html = client.get("/console/transactions").content.decode()
    assert html.index("enricher") < html.index("settled"), "open transactions come first"
    assert "Ongoing" in html and "CompleteCommit" in html and "ledger partition 0" in html and "120 s" in html
    assert "bobs-enricher" not in html and "secrets" not in html and f"t{tenant.id}." not in html
    assert 'href="/console/transactions/enricher/abort"' in html
    assert "/console/transactions/settled/abort" not in html  # nothing open to abort

    asked = client.get("/console/transactions/enricher/abort").content.decode()
    assert "cannot be undone" in asked and "ledger partition 0" in asked
    wrong = client.post("/console/transactions/enricher/abort", {"confirm": "enrich"})
    assert wrong.status_code == 400
    assert asyncio.run(_state(broker.bootstrap, f"t{tenant.id}.txn.enricher")) == "Ongoing"
    assert client.get("/console/transactions/bobs-enricher/abort").status_code == 404  # another tenant's: not there

    done = client.post("/console/transactions/enricher/abort", {"confirm": "enricher"})
    assert done.status_code == 302 and done["Location"] == "/console/transactions?aborted=enricher"
    assert asyncio.run(_state(broker.bootstrap, f"t{tenant.id}.txn.enricher")) in ("PrepareAbort", "CompleteAbort")
    assert asyncio.run(_state(broker.bootstrap, f"t{other.id}.txn.bobs-enricher")) == "Ongoing"
    assert AuditEntry.objects.filter(tenant=tenant, action="transaction.abort", target="enricher").exists()
    assert "was aborted" in client.get(done["Location"]).content.decode()

    assert oldest_open_transactions([tenant.id]) == {tenant.id: 0.0}
    evaluate_all({}, stale_ms=60_000, oldest_transactions=oldest_open_transactions([tenant.id]))
    rule.refresh_from_db()
    assert rule.state == "OK", rule.state
