"""Queues through the REST API exist on the brokers as asked, change there, and leave no data when deleted."""

from __future__ import annotations

import asyncio

import msgspec
from tideway_server.brokers.storage.manager import read_topics

from tests.harness.waiting import wait_until
from tideway.native import TidewayClient


def _broker_metadata(control_plane, topic: str):
    async def fetch():
        async with TidewayClient(control_plane.deployment.bootstrap) as client:
            return await client.partitions_for(topic)

    return asyncio.run(fetch())


def _partition_dirs(control_plane, topic: str) -> list[str]:
    found = []
    for broker in control_plane.deployment.brokers.values():
        found += [f"{broker.broker_id}:{p.name}" for p in broker.data_dir.iterdir() if p.is_dir() and p.name.rsplit("-", 1)[0] == topic]
    return sorted(found)


def _topic_settings(control_plane, topic: str) -> dict:
    """The topic's settings as broker 1 stored them (topics.json and its journal)."""
    stored = read_topics(str(control_plane.deployment.brokers[1].data_dir)).get(topic)
    return {} if stored is None else msgspec.to_builtins(stored)


def test_created_queue_exists_on_the_brokers_then_grows_and_is_deleted_with_its_data(control_plane):
    tenant, key = control_plane.create_tenant(plan="team")
    with control_plane.client(key) as api:
        created = api.post("/api/v1/queues/", json={"name": "orders", "mode": "queue", "partitions": 4,
                                                    "replication_factor": 3, "visibility_timeout_ms": 45_000,
                                                    "retention_ms": 3_600_000})
        assert created.status_code == 201, created.text
        body = created.json()
        assert body["status"] == "ready" and body["partitions"] == 4 and body["dead_letter_queue"] == "orders.dlq"
        me = api.get("/api/v1/tenant").json()
        topic = next(t for t in control_plane.describe().topics if t.name.endswith(".orders"))
        assert topic.partitions == 4 and topic.replication_factor == 3
        partitions = _broker_metadata(control_plane, topic.name)
        assert len(partitions) == 4 and all(len(set(p.replicas)) == 3 for p in partitions)
        # Every replica is a directory on a broker: 4 partitions x 3 replicas.
        assert len(wait_until(lambda: _partition_dirs(control_plane, topic.name) if len(_partition_dirs(control_plane, topic.name)) == 12 else None,
                            what="12 replica directories")) == 12
        assert len(_partition_dirs(control_plane, topic.name + ".dlq")) == 12
        settings = _topic_settings(control_plane, topic.name)
        assert settings["visibility_timeout_ms"] == 45_000 and settings["retention_ms"] == 3_600_000
        assert me["usage"] == {"queues": 1, "partitions": 4, "reserved_storage_bytes": body["retention_bytes"] * 4}

        # Partitions grow, settings change on the brokers; partitions never shrink; the mode is fixed.
        grown = api.patch("/api/v1/queues/orders", json={"partitions": 6, "retention_ms": 7_200_000})
        assert grown.status_code == 200, grown.text
        assert len(_broker_metadata(control_plane, topic.name)) == 6
        wait_until(lambda: _topic_settings(control_plane, topic.name).get("retention_ms") == 7_200_000, what="new retention on broker 1")
        shrink = api.patch("/api/v1/queues/orders", json={"partitions": 2})
        assert shrink.status_code == 400 and shrink.json()["code"] == "partitions_cannot_shrink"
        fixed = api.patch("/api/v1/queues/orders", json={"mode": "stream"})
        assert fixed.status_code == 400 and fixed.json()["code"] == "immutable_setting"
        assert api.get("/api/v1/queues/orders").json()["partitions"] == 6

        again = api.post("/api/v1/queues/", json={"name": "orders"})
        assert again.status_code == 409 and again.json()["code"] == "queue_exists"

        deleted = api.delete("/api/v1/queues/orders")
        assert deleted.status_code == 204
        assert api.get("/api/v1/queues/orders").status_code == 404
        wait_until(lambda: not _partition_dirs(control_plane, topic.name) and not _partition_dirs(control_plane, topic.name + ".dlq"),
                 what="no replica directory left")
        assert all(t.name != topic.name for t in control_plane.describe().topics)
        actions = [e["action"] for e in api.get("/api/v1/audit/").json()]
        assert actions[:3] == ["queue.delete", "queue.update", "queue.create"]
    assert tenant


def test_two_tenants_may_use_the_same_name_without_sharing_a_topic(control_plane):
    _, key_a = control_plane.create_tenant()
    _, key_b = control_plane.create_tenant()
    with control_plane.client(key_a) as a, control_plane.client(key_b) as b:
        assert a.post("/api/v1/queues/", json={"name": "events", "mode": "stream", "replication_factor": 1}).status_code == 201
        assert b.post("/api/v1/queues/", json={"name": "events", "mode": "stream", "replication_factor": 1}).status_code == 201
        names = [t.name for t in control_plane.describe().topics if t.name.endswith(".events")]
        assert len(names) == 2 and len(set(names)) == 2
        assert a.delete("/api/v1/queues/events").status_code == 204
        assert b.get("/api/v1/queues/events").json()["status"] == "ready"
