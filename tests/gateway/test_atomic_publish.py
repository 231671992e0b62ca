"""Publishing to several queues in one request, all or nothing (issue 44): POST /api/v1/publish is one transaction
on the brokers. Every check refuses the whole request before anything is sent; a failure after sending aborts
the transaction, so readers (which read committed data only) see none of it."""

from __future__ import annotations

import asyncio

from tests.harness.gateway import make_queue
from tests.harness.processes import OPERATOR_KEY
from tideway.native import Consumer, TidewayClient


def _stored(api, name: str) -> list[str]:
    return [m["value"] for m in api.get(f"/api/v1/queues/{name}/messages", params={"max_messages": 1000}).json()["messages"]]


def _receive(api, name: str, group: str = "workers") -> list[dict]:
    got: list[dict] = []
    while True:
        answer = api.post(f"/api/v1/queues/{name}/groups/{group}/receive", json={"max_messages": 100, "wait_seconds": 2})
        assert answer.status_code == 200, answer.text
        if not answer.json()["messages"]:
            return got
        got += answer.json()["messages"]


async def _values(bootstrap: str, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
        values = []
        for partition in range(partitions):
            async with Consumer(client, isolation_level=isolation_level) as consumer:
                await consumer.assign([(topic, partition)], start="earliest")
                for records in (await consumer.getmany(1500)).values():
                    values += [r.value for r in records]
        return values


async def _broker_topic(bootstrap: str, name: str) -> str:
    async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
        return next(t for t in await client.list_topics() if t.endswith("." + name))


def test_an_atomic_publish_stores_every_queues_messages_and_answers_where_each_went(gateway, tenant):
    _, key = tenant
    orders, audit = make_queue(gateway, key, partitions=2), make_queue(gateway, key, partitions=1, mode="stream")
    with gateway.client(key) as api:
        answer = api.post("/api/v1/publish", json={"queues": [
            {"queue": orders, "messages": [{"value": f"order {i}", "key": f"customer-{i % 3}"} for i in range(20)]},
            {"queue": audit, "messages": [{"value": f"audit {i}", "headers": {"by": "checkout"}} for i in range(5)]}]})
        assert answer.status_code == 200, answer.text
        placed = answer.json()["queues"]
        assert [q["queue"] for q in placed] == [orders, audit]
        assert len(placed[0]["messages"]) == 20 and len(placed[1]["messages"]) == 5
        assert [m["offset"] for m in placed[1]["messages"]] == list(range(5))
        assert sorted(m["value"] for m in _receive(api, orders)) == sorted(f"order {i}" for i in range(20))
        read = api.get(f"/api/v1/queues/{audit}/partitions/0/messages", params={"offset": 0, "max_messages": 100})
        assert [m["value"] for m in read.json()["messages"]] == [f"audit {i}" for i in range(5)]
        assert read.json()["messages"][0]["headers"] == {"by": "checkout"}
        # Another transaction after it: its records come after the first one's commit marker.
        again = api.post("/api/v1/publish", json={"queues": [{"queue": audit, "messages": [{"value": "audit 5"}]}]})
        assert again.status_code == 200 and again.json()["queues"][0]["messages"][0]["offset"] == 6, again.text


def test_a_refusal_for_one_queue_publishes_nothing_to_any(gateway, tenant):
    _, key = tenant
    first = make_queue(gateway, key, partitions=1)
    small = make_queue(gateway, key, partitions=1, max_message_bytes=2000)
    with gateway.client(key) as api:
        api.post(f"/api/v1/queues/{small}/messages", json={"messages": [{"value": "taken", "dedup_id": "payment-1"}]})
        good = {"queue": first, "messages": [{"value": "must not appear", "dedup_id": "first-1"}]}
        cases = [
            ({"queues": [good, {"queue": small, "messages": [{"value": "x" * 2001}]}]}, 413, "message_too_large"),
            ({"queues": [good, {"queue": "no-such-queue", "messages": [{"value": "x"}]}]}, 404, "queue_not_found"),
            ({"queues": [good, {"queue": small, "messages": [{"value": "x", "dedup_id": "payment-1"}]}]}, 409,
             "duplicate_message"),
            ({"queues": [good, {"queue": small, "messages": [{"value": "x", "partition": 3}]}]}, 400, "invalid_request"),
            ({"queues": [good, good]}, 400, "invalid_request"),
            ({"queues": [good, {"queue": small, "messages": [{"value": "x"}] * 1000}]}, 400, "invalid_request"),
            ({"queues": []}, 400, "invalid_request"),
            ({"queues": [{"queue": first, "messages": []}]}, 400, "invalid_request"),
            ({"queues": [{"queue": "bad name!", "messages": [{"value": "x"}]}]}, 400, "invalid_request"),
        ]
        for body, status, code in cases:
            refused = api.post("/api/v1/publish", json=body)
            assert (refused.status_code, refused.json()["code"]) == (status, code), (body, refused.text)
        assert _stored(api, first) == [] and _stored(api, small) == ["taken"]
        # The refused requests' dedup ids were freed: the first queue's message may be published now.
        assert api.post("/api/v1/publish", json={"queues": [good]}).status_code == 200
        assert _stored(api, first) == ["must not appear"]

        limited = api.post("/api/v1/keys/", json={"name": "first-only", "scopes": ["produce", "consume"],
                                                  "queue_patterns": [first]}).json()["key"]
        with gateway.client(limited) as other:
            refused = other.post("/api/v1/publish", json={"queues": [
                {"queue": first, "messages": [{"value": "y"}]}, {"queue": small, "messages": [{"value": "y"}]}]})
            assert (refused.status_code, refused.json()["code"]) == (403, "forbidden"), refused.text
        consume_only = api.post("/api/v1/keys/", json={"name": "reader", "scopes": ["consume"]}).json()["key"]
        with gateway.client(consume_only) as reader:
            refused = reader.post("/api/v1/publish", json={"queues": [{"queue": first, "messages": [{"value": "y"}]}]})
            assert (refused.status_code, refused.json()["code"]) == (403, "forbidden"), refused.text
        assert _stored(api, first) == ["must not appear"] and _stored(api, small) == ["taken"]


def test_a_failure_after_sending_aborts_what_was_written(gateway, tenant):
    """The second queue's topic is deleted at the brokers behind the gateway's back (as a concurrent delete would):
    the first queue's messages were written already, and the abort keeps every reader from them."""
    _, key = tenant
    kept, doomed = make_queue(gateway, key, partitions=1), make_queue(gateway, key, partitions=1)
    bootstrap = gateway.deployment.bootstrap
    with gateway.client(key) as api:
        warm = api.post("/api/v1/publish", json={"queues": [{"queue": kept, "messages": [{"value": "before"}]},
                                                             {"queue": doomed, "messages": [{"value": "before"}]}]})
        assert warm.status_code == 200, warm.text  # the gateway knows both queues now
        kept_topic = asyncio.run(_broker_topic(bootstrap, kept))

        async def delete() -> None:
            async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
                await client.delete_topic(await _broker_topic(bootstrap, doomed))

        asyncio.run(delete())
        failed = api.post("/api/v1/publish", json={"queues": [
            {"queue": kept, "messages": [{"value": f"aborted {i}"} for i in range(10)]},
            {"queue": doomed, "messages": [{"value": "nowhere"}]}]})
        assert (failed.status_code, failed.json()["code"]) == (404, "queue_not_found"), failed.text
        assert _stored(api, kept) == ["before"]
        assert [m["value"] for m in _receive(api, kept)] == ["before"]
        everything = asyncio.run(_values(bootstrap, kept_topic, 1, "read_uncommitted"))
        assert everything == [b"before"] + [b"aborted %d" % i for i in range(10)], "nothing was written: no abort tested"
        assert asyncio.run(_values(bootstrap, kept_topic, 1, "read_committed")) == [b"before"]
        after = api.post("/api/v1/publish", json={"queues": [{"queue": kept, "messages": [{"value": "after"}]}]})
        assert after.status_code == 200, after.text
        assert _stored(api, kept) == ["before", "after"]
