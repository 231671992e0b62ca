"""The gateway meters its own requests and the bytes it carried (REST bodies, WebSocket frames) to __usage, per
queue, exactly; the brokers meter the messages (issue 17)."""

from __future__ import annotations

import asyncio
import json

import websockets

from tests.harness.gateway import make_queue
from tests.usage_records import usage_of_queue


def test_rest_calls_and_websocket_frames_are_metered_with_their_bytes(gateway, tenant):
    _, key = tenant
    name = make_queue(gateway, key, partitions=2)
    requests = bytes_in = bytes_out = 0
    with gateway.client(key) as api:
        for i in range(4):
            body = json.dumps({"messages": [{"value": f"order {i}-{j}"} for j in range(10)]}).encode()
            answer = api.post(f"/api/v1/queues/{name}/messages", content=body, headers={"Content-Type": "application/json"})
            assert answer.status_code == 200, answer.text
            requests, bytes_in, bytes_out = requests + 1, bytes_in + len(body), bytes_out + len(answer.content)
        body = json.dumps({"max_messages": 10}).encode()
        answer = api.post(f"/api/v1/queues/{name}/groups/billing/receive", content=body,
                          headers={"Content-Type": "application/json"})
        assert answer.status_code == 200 and answer.json()["messages"], answer.text
        requests, bytes_in, bytes_out = requests + 1, bytes_in + len(body), bytes_out + len(answer.content)

    async def socket() -> tuple[int, int, int]:
        sent = received = 0
        ws = await websockets.connect(gateway.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{name}",
                                      additional_headers={"Authorization": f"Bearer {key}"})
        async with ws:
            received += len((await ws.recv()).encode())  # ready
            for frame in ({"type": "publish", "id": 1, "messages": [{"value": "over the socket"}]}, {"type": "ping", "id": 2}):
                text = json.dumps(frame)
                await ws.send(text)
                sent += len(text.encode())
                received += len((await ws.recv()).encode())  # published, pong
        return 2, sent, received

    frames, ws_in, ws_out = asyncio.run(socket())
    expected = {"gateway_requests": requests + frames, "gateway_bytes_in": bytes_in + ws_in,
                "gateway_bytes_out": bytes_out + ws_out}

    # The gateway and the brokers flush on their own clocks: wait for both sides.
    got = usage_of_queue(gateway.deployment.bootstrap, name, lambda got: got.get(
        "gateway_requests", 0) >= expected["gateway_requests"] and got.get("messages_in", 0) >= 41)
    assert {k: got.get(k) for k in expected} == expected
    assert got["messages_in"] == 41  # the brokers' side: 4 x 10 over REST and 1 over the socket
