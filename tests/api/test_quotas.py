"""Every plan quota refuses creation past its limit with a 4xx naming it, and changes nothing."""

from __future__ import annotations

import pytest

# The free plan: 5 queues, 10 partitions, 1 GiB of reserved storage, 256 KiB messages, 7 days.
FREE_STORAGE = 1 << 30


def _refused(answer, quota: str) -> None:
    assert answer.status_code == 403, answer.text
    body = answer.json()
    assert body["code"] == "quota_exceeded" and body["details"]["quota"] == quota and quota in body["message"]


def _queue_names(api) -> list[str]:
    return [q["name"] for q in api.get("/api/v1/queues/").json()]


def test_max_queues(control_plane):
    _, key = control_plane.create_tenant()
    with control_plane.client(key) as api:
        for i in range(5):
            assert api.post("/api/v1/queues/", json={"name": f"q{i}", "replication_factor": 1,
                                                    "retention_bytes": 16 << 20}).status_code == 201
        _refused(api.post("/api/v1/queues/", json={"name": "q5", "replication_factor": 1, "retention_bytes": 16 << 20}), "max_queues")
        assert len(_queue_names(api)) == 5


def test_max_partitions_on_create_and_on_growth(control_plane):
    _, key = control_plane.create_tenant()
    with control_plane.client(key) as api:
        assert api.post("/api/v1/queues/", json={"name": "a", "partitions": 8, "replication_factor": 1,
                                                "retention_bytes": 16 << 20}).status_code == 201
        _refused(api.post("/api/v1/queues/", json={"name": "b", "partitions": 3, "replication_factor": 1,
                                                  "retention_bytes": 16 << 20}), "max_partitions")
        _refused(api.patch("/api/v1/queues/a", json={"partitions": 11}), "max_partitions")
        assert _queue_names(api) == ["a"] and api.get("/api/v1/queues/a").json()["partitions"] == 8


@pytest.mark.parametrize(
    ("settings", "quota"),
    [
        ({"partitions": 2, "retention_bytes": FREE_STORAGE // 2 + (1 << 20)}, "max_storage_bytes"),
        ({"max_message_bytes": 512 * 1024}, "max_message_bytes"),
        ({"retention_ms": 8 * 24 * 3600 * 1000}, "max_retention_ms"),
    ],
)
def test_size_and_retention_quotas(control_plane, settings, quota):
    _, key = control_plane.create_tenant()
    with control_plane.client(key) as api:
        _refused(api.post("/api/v1/queues/", json={"name": "big", "replication_factor": 1, **settings}), quota)
        assert _queue_names(api) == []
        # The same settings fit once the tenant is on a bigger plan... or just within the limit here.
        assert api.post("/api/v1/queues/", json={"name": "small", "replication_factor": 1}).status_code == 201
        _refused(api.patch("/api/v1/queues/small", json=settings), quota)

