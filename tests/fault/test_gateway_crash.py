"""Crash the ASGI server, then a broker, in the middle of a stream of REST publishes and WebSocket deliveries:
no acknowledged publish is lost, and deliveries that were never acknowledged come back."""

from __future__ import annotations

import asyncio
import itertools
import json
import random

import httpx
import pytest
import websockets

from tests.harness.control_plane import running_control_plane


@pytest.fixture
def plane(tmp_path):
    with running_control_plane(tmp_path, f"sqlite://{tmp_path}/control.sqlite3") as running:
        yield running


async def test_killing_the_gateway_then_a_broker_loses_no_acknowledged_publish(plane):
    _, key = plane.create_tenant(plan="team")
    headers = {"Authorization": f"Bearer {key}"}
    with plane.client(key) as api:
        created = api.post("/api/v1/queues/", json={"name": "orders", "partitions": 3, "replication_factor": 3,
                                                     "visibility_timeout_ms": 3000, "max_deliveries": 100})
        assert created.status_code == 201, created.text
    acked: set[str] = set()
    # Deliveries are numbered in the order they arrive. An acquisition is written without the
    # receiver waiting for it, so one that a killed coordinator had not yet written comes back with
    # the same delivery count: "came back" means delivered again later, whatever the count.
    deliveries = itertools.count()
    kept: dict[str, int] = {}  # delivered over the WebSocket and never acked: value -> number of that delivery
    last_delivered: dict[str, int] = {}  # value -> number of its latest delivery anywhere
    stop = asyncio.Event()
    last_refusal: list[str] = []
    rng = random.Random(6)

    async def publish() -> None:
        batch_number = 0
        async with httpx.AsyncClient(base_url=plane.base_url, headers=headers, timeout=60) as http:
            while not stop.is_set():
                values = [f"b{batch_number}-m{i}" for i in range(20)]
                body = {"messages": [{"value": v, "key": v[-2:], "dedup_id": v} for v in values]}
                while True:  # retry the same batch (same dedup ids) until it is acknowledged
                    try:
                        answer = await http.post("/api/v1/queues/orders/messages", json=body)
                    except httpx.TransportError:
                        await asyncio.sleep(0.2)
                        continue
                    if answer.status_code == 200:
                        acked.update(values)
                        break
                    if answer.status_code == 409 and answer.json()["code"] == "publish_in_progress":
                        # The killed gateway reserved these ids mid-publish: wait until the reservation lapses.
                        await asyncio.sleep(int(answer.headers["Retry-After"]))
                        continue
                    if answer.status_code == 409:  # some were stored by an attempt whose answer was lost
                        duplicates = {d["dedup_id"] for d in answer.json()["details"]["duplicates"]}
                        acked.update(duplicates)
                        body = {"messages": [m for m in body["messages"] if m["dedup_id"] not in duplicates]}
                        if not body["messages"]:
                            break
                        continue
                    assert answer.status_code in (503, 502, 429), answer.text
                    last_refusal[:] = [answer.text[:500]]
                    await asyncio.sleep(0.2)
                batch_number += 1

    async def consume() -> None:
        url = plane.base_url.replace("http://", "ws://") + "/ws/v1/queues/orders"
        while not stop.is_set():
            try:
                async with websockets.connect(url, additional_headers=headers, open_timeout=5) as ws:
                    await ws.send(json.dumps({"type": "subscribe", "group": "workers", "prefetch": 50}))
                    while not stop.is_set():
                        frame = json.loads(await asyncio.wait_for(ws.recv(), 5))
                        if frame["type"] != "messages":
                            continue
                        numbered = [(next(deliveries), m) for m in frame["messages"]]
                        last_delivered.update((m["value"], number) for number, m in numbered)
                        keep = [m for m in frame["messages"] if rng.random() < 0.3]  # never acked: must come back
                        kept.update((m["value"], last_delivered[m["value"]]) for m in keep)
                        done = [m["receipt"] for m in frame["messages"] if m not in keep]
                        await ws.send(json.dumps({"type": "ack", "receipts": done}))
            except (OSError, websockets.WebSocketException, TimeoutError):
                await asyncio.sleep(0.2)

    tasks = [asyncio.ensure_future(publish()), asyncio.ensure_future(consume())]
    await asyncio.sleep(2)
    plane.kill_server()
    await asyncio.sleep(1)
    await asyncio.to_thread(plane.start_server)
    await asyncio.sleep(2)
    plane.deployment.brokers[2].kill()
    await asyncio.sleep(4)
    stop.set()
    try:
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    except TimeoutError:
        raise AssertionError(f"the load did not finish; last refusal: {last_refusal}") from None
    assert len(acked) > 200 and kept

    # Drain: every acknowledged publish is there, and every delivery that was never acked came back.
    seen: set[str] = set()
    async with httpx.AsyncClient(base_url=plane.base_url, headers=headers, timeout=60) as http:
        empty_rounds = 0
        while empty_rounds < 3:
            answer = await http.post("/api/v1/queues/orders/groups/workers/receive", json={"max_messages": 1000, "wait_seconds": 4})
            assert answer.status_code == 200, answer.text
            messages = answer.json()["messages"]
            empty_rounds = 0 if messages else empty_rounds + 1
            seen.update(m["value"] for m in messages)
            last_delivered.update((m["value"], next(deliveries)) for m in messages)
            if messages:
                await http.post("/api/v1/queues/orders/groups/workers/ack", json={"receipts": [m["receipt"] for m in messages]})
        peeked = set()
        for partition in range(3):
            page = (await http.get(f"/api/v1/queues/orders/partitions/{partition}/messages", params={"from": "earliest", "max_messages": 1000})).json()
            while page["messages"]:
                peeked.update(m["value"] for m in page["messages"])
                page = (await http.get(f"/api/v1/queues/orders/partitions/{partition}/messages",
                                       params={"offset": page["next_offset"], "max_messages": 1000})).json()
    missing = acked - peeked
    assert not missing, f"{len(missing)} acknowledged publishes are not in the queue, e.g. {sorted(missing)[:5]}"
    not_back = sorted(value for value, number in kept.items() if last_delivered[value] <= number)
    assert not not_back, f"{len(not_back)} unacknowledged deliveries never came back, e.g. {not_back[:5]}"
    assert not (acked - seen - set(last_delivered)), "every acknowledged publish was delivered"
