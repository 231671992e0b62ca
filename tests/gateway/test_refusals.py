"""Bad input gets the documented error and changes nothing; dedup ids, schemas, size limits and rate limits."""

from __future__ import annotations

import io
import json
import time
from concurrent.futures import ThreadPoolExecutor

import fastavro
import redis

from tests.harness.gateway import make_queue

ORDER_JSON_SCHEMA = json.dumps({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]})
ORDER_AVRO = {"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]}


def _stored(api, name: str) -> list:
    return api.get(f"/api/v1/queues/{name}/messages", params={"max_messages": 1000}).json()["messages"]


def test_bad_input_is_refused_with_its_code_and_stores_nothing(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1, max_message_bytes=2000)
    url = f"/api/v1/queues/{name}/messages"
    with gateway.client(key) as api:
        assert api.post(url, json={"messages": [{"value": "kept"}]}).status_code == 200
        before = _stored(api, name)
        cases = [
            (dict(content=b"{not json", headers={"Content-Type": "application/json"}), 400, "malformed_request"),
            (dict(json={"messages": "no"}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "x", "colour": "red"}]}), 400, "invalid_request"),
            (dict(json={"messages": []}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "x"}] * 1001}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "ok"}, {"value": "x" * 2001}]}), 413, "message_too_large"),
            (dict(json={"messages": [{"value_base64": "***"}]}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "x", "partition": 5}]}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "x", "deliver_at": "tomorrow"}]}), 400, "invalid_request"),
            (dict(json={"messages": [{"value": "x", "headers": {"tideway-dlq-group": "forged"}}]}), 400, "invalid_request"),
            (dict(content=b'{"messages": [{"value": "' + b"x" * (17 << 20) + b'"}]}', headers={"Content-Type": "application/json"}),
             413, "request_too_large"),
        ]
        for kwargs, status, code in cases:
            answer = api.post(url, **kwargs)
            assert (answer.status_code, answer.json()["code"]) == (status, code), answer.text[:300]
            assert set(answer.json()) >= {"code", "message", "error_code"} and answer.json()["message"]
        unknown = api.post("/api/v1/queues/no-such-queue/messages", json={"messages": [{"value": "x"}]})
        assert (unknown.status_code, unknown.json()["code"]) == (404, "queue_not_found")
        bad_receipt = api.post(f"/api/v1/queues/{name}/groups/g/ack", json={"receipts": ["nonsense"]})
        assert (bad_receipt.status_code, bad_receipt.json()["code"]) == (400, "invalid_request")
        assert api.post(f"/api/v1/queues/{name}/groups/bad%20group/receive", json={}).status_code == 404
        assert _stored(api, name) == before
    with gateway.client("tw_000000000000_wrong") as wrong:
        answer = wrong.post(url, json={"messages": [{"value": "x"}]})
        assert (answer.status_code, answer.json()["code"]) == (401, "invalid_credentials")
    with gateway.client() as anonymous:
        assert anonymous.post(url, json={"messages": [{"value": "x"}]}).json()["code"] == "unauthenticated"
    with gateway.client(key) as api:
        assert _stored(api, name) == before


def test_a_revoked_key_stops_publishing_within_five_seconds(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        created = api.post("/api/v1/keys/", json={"name": "soon-revoked", "scopes": ["produce", "consume"]}).json()
        with gateway.client(created["key"]) as short_lived:
            assert short_lived.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "x"}]}).status_code == 200
            assert api.delete(f"/api/v1/keys/{created['prefix']}").status_code == 200
            revoked_at = time.monotonic()
            # Five seconds after the revocation the key is refused (however slow this machine is).
            time.sleep(max(0.0, revoked_at + 5 - time.monotonic()))
            refused = short_lived.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": "y"}]})
            assert refused.status_code == 401 and "revoked" in refused.json()["message"]
        assert [m["value"] for m in _stored(api, name)] == ["x"]


def test_dedup_ids_are_refused_for_five_minutes_and_nothing_is_stored_twice(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    url = f"/api/v1/queues/{name}/messages"
    with gateway.client(key) as api:
        first = api.post(url, json={"messages": [{"value": "pay #1", "dedup_id": "payment-1"}, {"value": "pay #2", "dedup_id": "payment-2"}]})
        assert first.status_code == 200
        where = first.json()["messages"][0]
        again = api.post(url, json={"messages": [{"value": "pay #3", "dedup_id": "payment-3"}, {"value": "pay #1", "dedup_id": "payment-1"}]})
        assert again.status_code == 409 and again.json()["code"] == "duplicate_message"
        assert again.json()["details"]["duplicates"] == [{"index": 1, "dedup_id": "payment-1", **where}]
        twice = api.post(url, json={"messages": [{"value": "a", "dedup_id": "same"}, {"value": "b", "dedup_id": "same"}]})
        assert twice.status_code == 409
        # Nothing of the refused requests was stored; payment-3 and "same" are free to use now.
        assert sorted(m["value"] for m in _stored(api, name)) == ["pay #1", "pay #2"]
        assert api.post(url, json={"messages": [{"value": "pay #3", "dedup_id": "payment-3"}]}).status_code == 200
        # An id whose publish is still in flight (or whose gateway died mid-publish) is refused until it settles or lapses.
        db = redis.Redis.from_url(gateway.redis_url)
        [stored_key] = db.keys(b"tw:dd:*:payment-1")
        in_flight_key = stored_key.replace(b"payment-1", b"payment-4")
        db.set(in_flight_key, "pending", ex=30)
        busy = api.post(url, json={"messages": [{"value": "pay #4", "dedup_id": "payment-4"}, {"value": "pay #5", "dedup_id": "payment-5"}]})
        assert busy.status_code == 409 and busy.json()["code"] == "publish_in_progress" and int(busy.headers["Retry-After"]) >= 1
        assert busy.json()["details"]["in_flight"] == [{"index": 0, "dedup_id": "payment-4"}]
        db.delete(in_flight_key)
        assert api.post(url, json={"messages": [{"value": "pay #4", "dedup_id": "payment-4"}, {"value": "pay #5", "dedup_id": "payment-5"}]}).status_code == 200
        # The same id on another queue is another message.
        other = make_queue(gateway, key, partitions=1)
        assert api.post(f"/api/v1/queues/{other}/messages", json={"messages": [{"value": "x", "dedup_id": "payment-1"}]}).status_code == 200


def test_schema_validation_plain_json_and_confluent_wire_format(gateway, tenant):
    _, key = tenant
    with gateway.client(key) as api:
        subject = gateway.unique("orders-json")
        assert api.post(f"/api/v1/registry/subjects/{subject}/versions", json={"schema": ORDER_JSON_SCHEMA, "schemaType": "JSON"}).status_code == 200
        name = make_queue(gateway, key, partitions=1, schema_subject=subject, schema_encoding="json")
        url = f"/api/v1/queues/{name}/messages"
        assert api.post(url, json={"messages": [{"value": '{"id": 7}'}]}).status_code == 200
        for bad in ('{"id": "seven"}', '{"name": "x"}', "not json"):
            refused = api.post(url, json={"messages": [{"value": '{"id": 8}'}, {"value": bad}]})
            assert (refused.status_code, refused.json()["code"]) == (422, "schema_violation"), refused.text
            assert refused.json()["details"]["index"] == 1
        assert [m["value"] for m in _stored(api, name)] == ['{"id": 7}']

        avro_subject = gateway.unique("orders-avro")
        schema_id = api.post(f"/api/v1/registry/subjects/{avro_subject}/versions", json={"schema": json.dumps(ORDER_AVRO)}).json()["id"]
        avro_queue = make_queue(gateway, key, partitions=1, schema_subject=avro_subject, schema_encoding="confluent")

        def framed(record, sid=schema_id, extra=b""):
            body = io.BytesIO()
            fastavro.schemaless_writer(body, fastavro.parse_schema(ORDER_AVRO), record)
            import base64

            return base64.b64encode(b"\x00" + sid.to_bytes(4, "big") + body.getvalue() + extra).decode()

        url = f"/api/v1/queues/{avro_queue}/messages"
        assert api.post(url, json={"messages": [{"value_base64": framed({"id": 1})}]}).status_code == 200
        for bad in (framed({"id": 1}, sid=schema_id + 1000), framed({"id": 1}, extra=b"\x01\x02"), "AAAA"):
            refused = api.post(url, json={"messages": [{"value_base64": bad}]})
            assert (refused.status_code, refused.json()["code"]) == (422, "schema_violation"), refused.text
        assert len(_stored(api, avro_queue)) == 1


def test_rate_limits_answer_429_with_retry_after(gateway):
    _, key = gateway.create_tenant(plan="free")  # 50 requests/s, 1 MiB/s published
    name = make_queue(gateway, key, partitions=1, replication_factor=1)
    url = f"/api/v1/queues/{name}/messages"
    with gateway.client(key) as api:
        def peek(_):
            return api.get(url)

        with ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(peek, range(200)))
        throttled = [a for a in answers if a.status_code == 429]
        assert throttled, "200 requests at once exceed 50 requests/s"
        assert all(a.json()["code"] == "throttled" and int(a.headers["Retry-After"]) >= 1 for a in throttled)
        assert all(a.json()["details"]["limit"] == "requests" for a in throttled)
        assert all(a.status_code in (200, 429) for a in answers)
        time.sleep(1.1)
        # Bytes: 1 MiB/s of publishing; five 250 KB messages take it all, the next publish waits.
        big = [{"value": "x" * 250_000}] * 5
        assert api.post(url, json={"messages": big}).status_code == 200
        refused = api.post(url, json={"messages": big})
        assert refused.status_code == 429 and refused.json()["code"] == "throttled"
        assert refused.json()["details"]["limit"] == "publish_bytes"
        assert len(_stored(api, name)) == 5
        # Every refusal is counted for the tenant, by limit (the API, the console and the `throttled` alert metric).
        counts = api.get("/api/v1/tenant").json()["throttled"]
        assert counts["last_minute"] == counts["last_hour"] == counts["last_day"] == {
            "requests": len(throttled), "publish_bytes": 1, "consume_bytes": 0}


def test_every_data_endpoint_is_throttled_when_the_tenant_is_out_of_requests(gateway):
    from tests.api.test_isolation import ENDPOINTS, _fill

    _, key = gateway.create_tenant(plan="free")
    name = make_queue(gateway, key, partitions=1, replication_factor=1)
    ids = {"name": name, "group": "g", "partition": "0", "member_id": "m" * 32, "job_id": "0" * 32}
    db = redis.Redis.from_url(gateway.redis_url)
    with gateway.client(key) as api:
        known = set(db.keys("tw:rl:*:req"))
        api.get(f"/api/v1/queues/{name}/messages")
        [bucket] = set(db.keys("tw:rl:*:req")) - known
        db.hset(bucket, mapping={"t": -10_000, "ts": int(time.time() * 1000)})  # 200 s of debt at 50/s
        time.sleep(1.2)  # the gateway's local lease of the bucket lapses (limits.LEASE_SECONDS)
        walked = 0
        for path, methods, _view in ENDPOINTS:
            if path.endswith("/lag"):
                continue  # a control-plane read (looks and rollups), like the queue's own page: not the data path
            if not (path.startswith("/api/v1/queues/{name}/") or path == "/api/v1/tokens"):
                continue
            for method in methods:
                body = {"messages": [{"value": "x"}]} if path.endswith("{name}/messages") else {}
                answer = api.request(method.upper(), _fill(path, ids), json=body if method != "get" else None)
                assert answer.status_code == 429, f"{method.upper()} {path}: {answer.status_code}"
                assert answer.json()["code"] == "throttled" and int(answer.headers["Retry-After"]) > 100
                walked += 1
        assert walked >= 18
        db.delete(bucket)
        assert api.get(f"/api/v1/queues/{name}/messages").status_code == 200
