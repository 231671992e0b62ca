"""The queue model over REST against real processes: publish, receive, ack, nack, visibility expiry,
redelivery, dead-lettering, redrive (through the Celery worker) and purge."""

from __future__ import annotations

import time

from tests.harness.gateway import make_queue
from tests.harness.waiting import wait_until


def _receive(api, name, group="workers", **body):
    answer = api.post(f"/api/v1/queues/{name}/groups/{group}/receive", json={"max_messages": 100, **body})
    assert answer.status_code == 200, answer.text
    return answer.json()["messages"]


def test_publish_is_answered_with_where_each_message_went_and_receive_ack_consumes(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key)
    with gateway.client(key) as api:
        sent = [{"value": f"order-{i}", "key": f"customer-{i % 3}", "headers": {"trace": str(i)}} for i in range(50)]
        answer = api.post(f"/api/v1/queues/{name}/messages", json={"messages": sent})
        assert answer.status_code == 200, answer.text
        placed = answer.json()["messages"]
        assert len(placed) == 50 and all(p["offset"] >= 0 and p["partition"] in (0, 1) for p in placed)
        # Same key, same partition, offsets in publish order.
        for k in range(3):
            mine = [p for p, s in zip(placed, sent, strict=True) if s["key"] == f"customer-{k}"]
            assert len({p["partition"] for p in mine}) == 1
            assert [p["offset"] for p in mine] == sorted(p["offset"] for p in mine)
        got = _receive(api, name, wait_seconds=2)
        while len(got) < 50:
            more = _receive(api, name, wait_seconds=2)
            assert more, "every published message is delivered"
            got += more
        assert sorted(m["value"] for m in got) == sorted(s["value"] for s in sent)
        assert all(m["delivery_count"] == 1 and m["headers"]["trace"] for m in got)
        acked = api.post(f"/api/v1/queues/{name}/groups/workers/ack", json={"receipts": [m["receipt"] for m in got]})
        assert acked.status_code == 200 and acked.json() == {"acked": 50}
        assert _receive(api, name, wait_seconds=1) == []
        # Acking again with the same receipts is refused: the messages are gone.
        again = api.post(f"/api/v1/queues/{name}/groups/workers/ack", json={"receipts": [got[0]["receipt"]]})
        assert again.status_code == 409 and again.json()["code"] == "receipt_expired"
        # Another group has its own copy of every message.
        assert len(_receive(api, name, group="auditors", wait_seconds=2)) > 0


def test_binary_values_travel_as_base64(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        assert api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value_base64": "/wD+", "key_base64": "gA=="}]}).status_code == 200
        [message] = _receive(api, name, wait_seconds=2)
        assert message["value_base64"] == "/wD+" and message["key_base64"] == "gA==" and "value" not in message


def test_nack_visibility_expiry_redelivery_and_dead_letters(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1, max_deliveries=2, visibility_timeout_ms=1000)
    with gateway.client(key) as api:
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "a"}, {"value": "b"}, {"value": "c"}]})
        first = _receive(api, name, wait_seconds=2)
        assert [m["value"] for m in first] == ["a", "b", "c"]
        by_value = {m["value"]: m for m in first}
        # a: acked. b: nacked with no delay -> back at once, delivery 2. c: left alone -> back after its 1 s lock.
        api.post(f"/api/v1/queues/{name}/groups/workers/ack", json={"receipts": [by_value["a"]["receipt"]]})
        nacked = api.post(f"/api/v1/queues/{name}/groups/workers/nack", json={"receipts": [by_value["b"]["receipt"]], "delay_seconds": 0})
        assert nacked.status_code == 200
        again = _receive(api, name, wait_seconds=3, visibility_timeout=30)  # held 30 s, not the queue's 1 s
        assert [(m["value"], m["delivery_count"]) for m in again] == [("b", 2)]
        time.sleep(1.2)
        expired = _receive(api, name, wait_seconds=3)
        assert [(m["value"], m["delivery_count"]) for m in expired] == [("c", 2)]
        # The old receipt of c no longer acks: its lock passed and it was delivered again.
        stale = api.post(f"/api/v1/queues/{name}/groups/workers/ack", json={"receipts": [by_value["c"]["receipt"]]})
        assert stale.status_code == 409 and stale.json()["code"] == "receipt_expired"
        # Extending keeps c locked past its timeout.
        extended = api.post(f"/api/v1/queues/{name}/groups/workers/extend", json={"receipts": [expired[0]["receipt"]], "seconds": 30})
        assert extended.status_code == 200 and extended.json()["receipts"][0]["visible_at"] > time.time() * 1000 + 20_000
        # b reached its second (last) delivery: nacking it dead-letters it.
        api.post(f"/api/v1/queues/{name}/groups/workers/nack", json={"receipts": [again[0]["receipt"]], "delay_seconds": 0, "error": "boom"})
        assert _receive(api, name, wait_seconds=1) == []
        letters = wait_until(lambda: api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"], 10, "a dead letter")
        assert [d["value"] for d in letters] == ["b"]
        assert letters[0]["headers"]["tideway-dlq-last-error"] == "boom"
        # Redrive through the Celery worker: b comes back to the queue, and the dead-letter list empties.
        job = api.post(f"/api/v1/queues/{name}/dead-letters/redrive", json={"rate_per_s": 50})
        assert job.status_code == 202, job.text
        status_url = job.json()["status_url"]
        done = wait_until(lambda: (s := api.get(status_url).json())["state"] in ("SUCCESS", "FAILURE") and s, 30, "the redrive job")
        assert done == {"job_id": job.json()["job_id"], "state": "SUCCESS", "moved": 1}
        assert api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"] == []
        redriven = _receive(api, name, wait_seconds=3)
        assert [m["value"] for m in redriven] == ["b"]
        # Rejecting sends straight to the dead letters; purge clears them.
        api.post(f"/api/v1/queues/{name}/groups/workers/reject", json={"receipts": [redriven[0]["receipt"]], "error": "bad"})
        wait_until(lambda: api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"], 10, "the rejected message")
        purged = api.delete(f"/api/v1/queues/{name}/dead-letters")
        assert purged.status_code == 200 and purged.json() == {"purged": 1}
        assert api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"] == []


def test_long_polling_returns_when_a_message_arrives_and_delayed_messages_wait(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        due = int(time.time() * 1000) + 1500
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "later", "deliver_at": due}]})
        assert _receive(api, name, wait_seconds=0) == []
        [message] = _receive(api, name, wait_seconds=5)
        assert message["value"] == "later" and time.time() * 1000 >= due - 50


def test_peek_reads_without_consuming(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": str(i)} for i in range(5)]})
        peeked = api.get(f"/api/v1/queues/{name}/messages", params={"max_messages": 3}).json()["messages"]
        assert [m["value"] for m in peeked] == ["0", "1", "2"] and "receipt" not in peeked[0]
        assert len(_receive(api, name, wait_seconds=2)) == 5  # nothing was taken by the peek


def test_redrive_of_selected_dead_letters_then_of_the_rest(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": v} for v in ("a", "b", "c")]})
        got = _receive(api, name, wait_seconds=2)
        api.post(f"/api/v1/queues/{name}/groups/workers/reject", json={"receipts": [m["receipt"] for m in got], "error": "bad"})
        letters = wait_until(lambda: len(found := api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"]) == 3 and found, 10, "3 dead letters")
        b = next(d for d in letters if d["value"] == "b")

        def run(body) -> dict:
            status_url = api.post(f"/api/v1/queues/{name}/dead-letters/redrive", json=body).json()["status_url"]
            return wait_until(lambda: (s := api.get(status_url).json())["state"] in ("SUCCESS", "FAILURE") and s, 30, "the job")

        assert run({"messages": [{"partition": b["partition"], "offset": b["offset"]}]})["moved"] == 1
        assert sorted(d["value"] for d in api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"]) == ["a", "c"]
        assert [m["value"] for m in _receive(api, name, wait_seconds=3)] == ["b"]
        assert run({})["moved"] == 2  # the rest; b is not redriven twice
        assert api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"] == []
        assert sorted(m["value"] for m in _receive(api, name, wait_seconds=3)) == ["a", "c"]
        assert api.delete(f"/api/v1/queues/{name}/dead-letters").json() == {"purged": 0}


def test_a_rejected_message_is_a_dead_letter_with_its_real_time_when_the_reject_is_answered(gateway, tenant):
    """Issue 15: dead letters showed "timestamp": 0 and appeared 5-25 ms after the reject was answered."""
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        before_ms = int(time.time() * 1000)
        assert api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "poison"}]}).status_code == 200
        received = _receive(api, name, wait_seconds=5)
        answer = api.post(f"/api/v1/queues/{name}/groups/workers/reject", json={"receipts": [received[0]["receipt"]], "error": "bad"})
        assert answer.status_code == 200, answer.text
        letters = api.get(f"/api/v1/queues/{name}/dead-letters").json()["messages"]  # at once, no waiting
        assert [letter["value"] for letter in letters] == ["poison"]
        assert before_ms - 1000 <= letters[0]["timestamp"] <= int(time.time() * 1000)


def test_purge_deletes_every_message_held_and_in_flight_and_keeps_what_comes_after(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    with gateway.client(key) as api:
        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": f"old {i}"} for i in range(30)]})
        in_flight = _receive(api, name, max_messages=5, wait_seconds=2)
        assert in_flight

        limited = api.post("/api/v1/keys/", json={"name": "no-manage", "scopes": ["produce", "consume"]}).json()["key"]
        with gateway.client(limited) as other:
            refused = other.post(f"/api/v1/queues/{name}/purge")
            assert refused.status_code == 403 and refused.json()["code"] == "forbidden"
        assert api.get(f"/api/v1/queues/{name}/messages", params={"max_messages": 1}).json()["messages"]  # unchanged

        purged = api.post(f"/api/v1/queues/{name}/purge")
        assert purged.status_code == 200, purged.text
        assert purged.json()["purged"] == 30 and len(purged.json()["partitions"]) == 2
        assert api.get(f"/api/v1/queues/{name}/messages").json()["messages"] == []  # peek: nothing left
        assert _receive(api, name, wait_seconds=3) == []  # nor for the group, even what it had read ahead
        acked = api.post(f"/api/v1/queues/{name}/groups/workers/ack", json={"receipts": [in_flight[0]["receipt"]]})
        assert acked.status_code == 409 and acked.json()["code"] == "receipt_expired"
        assert api.post(f"/api/v1/queues/{name}/purge").json()["purged"] == 0  # again: nothing more

        api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "new"}]})
        assert [m["value"] for m in _receive(api, name, wait_seconds=3)] == ["new"]
        entries = api.get("/api/v1/audit/", params={"action": "queue.purge"})
        assert entries.status_code == 200, entries.text
        assert any(e["target"] == name and e["details"]["purged"] == 30 for e in entries.json())
