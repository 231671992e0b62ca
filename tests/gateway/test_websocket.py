"""The WebSocket endpoint against real processes: push with credit flow control, ack/nack by receipt, publish on the
same connection, ping/pong, release on disconnect, short-lived tokens."""

from __future__ import annotations

import asyncio
import json

import pytest
import websockets

from tests.harness.gateway import close_all, make_queue, pushed_values, subscribe_many
from tests.harness.waiting import wait_until


def _ws_url(gateway, name: str, token: str | None = None) -> str:
    url = gateway.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{name}"
    return url + (f"?token={token}" if token else "")


async def _next(ws, kind: str, timeout: float = 10.0) -> dict:
    """The next frame of type ``kind``, skipping others (an error frame fails the test)."""
    return (await _answer_and_pushes(ws, kind, timeout))[0]


async def _answer_and_pushes(ws, kind: str, timeout: float = 10.0) -> tuple[dict, list[dict]]:
    """Wait for the answer frame ``kind``, keeping the messages pushed meanwhile (credit freed by
    an ack is used at once, so new pushes may arrive before the ack's answer)."""
    pushed = []
    while True:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout))
        if frame["type"] == kind:
            return frame, pushed
        if frame["type"] == "messages":
            pushed += frame["messages"]
        assert frame["type"] != "error", frame


async def _connect(gateway, name: str, key: str):
    ws = await websockets.connect(_ws_url(gateway, name), additional_headers={"Authorization": f"Bearer {key}"})
    assert (await _next(ws, "ready"))["queue"] == name
    return ws


async def test_push_respects_prefetch_and_acks_free_credit(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    async with await _connect(gateway, name, key) as ws:
        await ws.send(json.dumps({"type": "publish", "id": 1, "messages": [{"value": f"m{i}"} for i in range(20)]}))
        published = await _next(ws, "published")
        assert published["id"] == 1 and len(published["messages"]) == 20
        await ws.send(json.dumps({"type": "subscribe", "group": "web", "prefetch": 5}))
        await _next(ws, "subscribed")
        got = []
        while len(got) < 5:
            got += (await _next(ws, "messages"))["messages"]
        assert len(got) == 5
        # No credit left: nothing more arrives until something is acked.
        with pytest.raises(TimeoutError):
            await _next(ws, "messages", timeout=1.5)
        await ws.send(json.dumps({"type": "ack", "id": 2, "receipts": [m["receipt"] for m in got[:3]]}))
        acked, more = await _answer_and_pushes(ws, "acked")
        assert acked["id"] == 2
        while len(more) < 3:
            more += (await _next(ws, "messages"))["messages"]
        assert len(more) == 3
        await ws.send(json.dumps({"type": "ping", "id": 3}))
        assert (await _next(ws, "pong"))["id"] == 3
        # Nack one with no delay: it is pushed again with delivery 2.
        await ws.send(json.dumps({"type": "nack", "receipts": [more[0]["receipt"]], "delay_seconds": 0}))
        redelivered = (await _next(ws, "messages"))["messages"]
        assert any(m["value"] == more[0]["value"] and m["delivery_count"] == 2 for m in redelivered)


async def test_disconnect_releases_unacked_messages_at_once(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1, visibility_timeout_ms=600_000)
    async with await _connect(gateway, name, key) as ws:
        await ws.send(json.dumps({"type": "publish", "id": 1, "messages": [{"value": f"job{i}"} for i in range(4)]}))
        await _next(ws, "published")
        await ws.send(json.dumps({"type": "subscribe", "group": "jobs", "prefetch": 10}))
        held = []
        while len(held) < 4:
            held += (await _next(ws, "messages"))["messages"]
    # The locks were 10 minutes long; another consumer gets the messages right away.
    async with await _connect(gateway, name, key) as ws:
        await ws.send(json.dumps({"type": "subscribe", "group": "jobs", "prefetch": 10}))
        again = []
        while len(again) < 4:
            again += (await _next(ws, "messages", timeout=10))["messages"]
        assert sorted(m["value"] for m in again) == [f"job{i}" for i in range(4)]
        assert all(m["delivery_count"] == 2 for m in again)


async def test_tokens_authenticate_browsers_and_narrow_the_key(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    with gateway.client(key) as api:
        token = api.post("/api/v1/tokens", json={"ttl_seconds": 60, "scopes": ["consume"], "queues": [name]})
        assert token.status_code == 201, token.text
        token = token.json()["token"]
        assert key.split("_", 2)[2] not in token  # the key's secret (which may contain "_") is not in the token
        # A token cannot obtain another token.
        assert gateway.client(token).post("/api/v1/tokens", json={}).status_code == 403
    async with websockets.connect(_ws_url(gateway, name, token)) as ws:
        await _next(ws, "ready")
        await ws.send(json.dumps({"type": "publish", "id": 1, "messages": [{"value": "x"}]}))
        refused = await _next(ws, "error")
        assert refused["code"] == "forbidden" and "produce" in refused["message"]
    other = make_queue(gateway, key, partitions=1)
    async with websockets.connect(_ws_url(gateway, other, token)) as ws:
        error = json.loads(await ws.recv())
        assert error["type"] == "error" and error["code"] == "forbidden"
        with pytest.raises(websockets.ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd.code == 4403
    async with websockets.connect(_ws_url(gateway, name, "twt_forged")) as ws:
        assert json.loads(await ws.recv())["code"] == "invalid_credentials"


def test_a_token_is_minted_only_for_queues_the_key_may_touch(gateway, tenant):
    """Issue 40: a key limited to ``orders*`` got 201 minting a token for ``ledger`` (refused wherever it was used,
    but the mint should refuse too)."""
    _, key = tenant
    with gateway.client(key) as api:
        limited = api.post("/api/v1/keys/", json={"name": "orders-only", "scopes": ["consume"],
                                                  "queue_patterns": ["orders*"]})
        assert limited.status_code == 201, limited.text
    with gateway.client(limited.json()["key"]) as api:
        for queues in (["ledger"], ["orders-eu", "ledger"], ["*"], ["o*"], ["ord?rs"]):
            refused = api.post("/api/v1/tokens", json={"ttl_seconds": 60, "queues": queues})
            assert refused.status_code == 403 and refused.json()["code"] == "forbidden", (queues, refused.text)
            assert "ledger" in refused.json()["message"] or "*" in refused.json()["message"] or "?" in refused.json()["message"]
        for queues in (["orders"], ["orders-eu", "orders.dlq"], ["orders-eu*"], ["orders*"], None):
            minted = api.post("/api/v1/tokens", json={"ttl_seconds": 60, "queues": queues})
            assert minted.status_code == 201, (queues, minted.text)


async def test_bad_frames_get_an_error_frame_and_the_connection_stays(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=1)
    async with await _connect(gateway, name, key) as ws:
        for frame, code in (("not json", "malformed_request"), (json.dumps({"type": "dance"}), "invalid_request"),
                            (json.dumps({"type": "ack", "receipts": ["x"]}), "invalid_request"),
                            (json.dumps({"type": "subscribe", "prefetch": 0}), "invalid_request")):
            await ws.send(frame)
            assert (await _next(ws, "error"))["code"] == code
        await ws.send(json.dumps({"type": "ping", "id": "still-here"}))
        assert (await _next(ws, "pong"))["id"] == "still-here"


async def test_a_tenant_over_its_rate_gets_a_throttle_frame_and_nothing_more_is_stored(gateway):
    _, key = gateway.create_tenant(plan="free")  # 50 requests/s
    name = make_queue(gateway, key, partitions=1, replication_factor=1)
    async with await _connect(gateway, name, key) as ws:
        for i in range(200):
            await ws.send(json.dumps({"type": "publish", "id": i, "messages": [{"value": f"m{i}"}]}))
        published, throttled = set(), []
        while len(published) + len(throttled) < 200:
            frame = json.loads(await asyncio.wait_for(ws.recv(), 10))
            if frame["type"] == "published":
                published.add(frame["id"])
            elif frame["type"] == "throttle":
                throttled.append(frame)
        assert throttled, "200 publish frames at once exceed 50 requests/s"
        assert all(t["code"] == "throttled" and t["retry_after_ms"] > 0 for t in throttled)
    with gateway.client(key) as api:
        # The burst left the tenant's request bucket in debt: read once it has refilled.
        peek = wait_until(lambda: (a := api.get(f"/api/v1/queues/{name}/messages", params={"max_messages": 1000})).status_code == 200 and a,
                        10, "the bucket to refill")
        stored = peek.json()["messages"]
    assert sorted(m["value"] for m in stored) == sorted(f"m{i}" for i in published)


async def test_many_subscribers_of_one_group_share_the_messages_in_turn(gateway):
    """200 subscribers, prefetch 10, one group: 400 messages reach every subscriber, none more than its share
    and a message (the group's receives are shared: none waits empty while another fills up)."""
    _, key = gateway.create_tenant(plan="business")
    name = make_queue(gateway, key, partitions=3)
    subscribers = await subscribe_many(_ws_url(gateway, name), {"Authorization": f"Bearer {key}"}, 200, group="crowd")
    try:
        async with await _connect(gateway, name, key) as publisher:
            for batch in range(4):
                await publisher.send(json.dumps({"type": "publish", "id": batch,
                                                 "messages": [{"value": f"m{batch}-{i}"} for i in range(100)]}))
                await _next(publisher, "published")
        got = await pushed_values(subscribers)
        values = [v for held in got for v in held]
        assert sorted(values) == sorted(f"m{b}-{i}" for b in range(4) for i in range(100))  # each once, none lost
        counts = sorted(len(held) for held in got)
        assert counts[0] >= 1, counts  # nobody starved
        assert counts[-1] <= 10, counts  # nobody over its prefetch (nothing was acked)
    finally:
        await close_all(subscribers)
