"""Gateway helpers: queues made over REST, many WebSocket subscribers and what they were pushed."""

from __future__ import annotations

import asyncio
import json

import websockets


def make_queue(gateway, key: str, **settings) -> str:
    name = gateway.unique(settings.pop("prefix", "q"))
    with gateway.client(key) as api:
        answer = api.post("/api/v1/queues/", json={"name": name, "replication_factor": 3, "partitions": 2, **settings})
        assert answer.status_code == 201, answer.text
    return name


async def subscribe_many(url: str, headers: dict, count: int, *, group: str, prefetch: int = 10) -> list:
    """``count`` WebSockets on ``url``, each subscribed to ``group``, once every one has its ``subscribed`` answer."""
    sockets = []
    try:
        for _ in range(count):
            ws = await websockets.connect(url, additional_headers=headers, open_timeout=30, max_queue=16)
            await ws.send(json.dumps({"type": "subscribe", "group": group, "prefetch": prefetch}))
            sockets.append(ws)
        for ws in sockets:
            while json.loads(await asyncio.wait_for(ws.recv(), 30))["type"] != "subscribed":
                pass
    except BaseException:
        await close_all(sockets)
        raise
    return sockets


async def pushed_values(sockets: list, *, quiet_s: float = 3.0) -> list[list[str]]:
    """The values pushed to each socket, in its order, until ``quiet_s`` pass with nothing new on it."""
    got: list[list[str]] = [[] for _ in sockets]

    async def collect(index: int, ws) -> None:
        try:
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), quiet_s))
                if frame["type"] == "messages":
                    got[index] += [m["value"] for m in frame["messages"]]
        except TimeoutError:
            pass

    await asyncio.gather(*(collect(i, ws) for i, ws in enumerate(sockets)))
    return got


async def close_all(sockets: list) -> None:
    await asyncio.gather(*(ws.close() for ws in sockets), return_exceptions=True)
