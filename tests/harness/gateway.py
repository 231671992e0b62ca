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


class PublishAndSubscribe:
    """A tenant's traffic through a gateway that faults will hit: REST publishes and WebSocket subscribers.

    Each publisher sends batches of 20 with dedup ids and retries a batch (same ids) until it is acknowledged,
    through connection errors and 502/503/429 answers; a 409 names the ids some earlier attempt stored. Each
    subscriber reconnects whenever its socket fails and acknowledges 70% of what it is pushed: the rest must come
    back (after the visibility timeout). ``check()`` drains the group over REST and lists what went wrong.
    """

    def __init__(self, base_url: str, key: str, queue: str, *, subscribers: int = 1, publishers: int = 1,
                 group: str = "workers", seed: int = 6) -> None:
        import itertools
        import random

        self.base_url, self.queue, self.group = base_url, queue, group
        self.headers = {"Authorization": f"Bearer {key}"}
        self.subscribers, self.publishers = subscribers, publishers
        self.acked: set[str] = set()
        # Deliveries are numbered in the order they arrive. An acquisition is written without the receiver waiting
        # for it, so one a killed coordinator had not yet written comes back with the same delivery count:
        # "came back" means delivered again later, whatever the count.
        self.deliveries = itertools.count()
        self.kept: dict[str, int] = {}  # pushed and never acked: value -> number of that delivery
        self.last_delivered: dict[str, int] = {}  # value -> number of its latest delivery anywhere
        self.connections = [0] * subscribers  # sockets each subscriber opened
        self.pushed_after_reconnect = [0] * subscribers  # messages pushed to it on its second socket or later
        self.last_refusal: list[str] = []
        self._stop = asyncio.Event()
        self._rng = random.Random(seed)
        self._tasks: list[asyncio.Task] = []

    def start(self) -> None:
        self._tasks = [*(asyncio.ensure_future(self._publish(i)) for i in range(self.publishers)),
                       *(asyncio.ensure_future(self._subscribe(i)) for i in range(self.subscribers))]

    async def stop(self, timeout_s: float = 120) -> None:
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.gather(*self._tasks), timeout_s)
        except TimeoutError:
            raise AssertionError(f"the load did not finish; last refusal: {self.last_refusal}") from None

    async def _publish(self, index: int) -> None:
        import httpx

        batch_number = 0
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=60) as http:
            while not self._stop.is_set():
                values = [f"p{index}-b{batch_number}-m{i}" for i in range(20)]
                body = {"messages": [{"value": v, "key": v[-2:], "dedup_id": v} for v in values]}
                while True:  # the same batch (same dedup ids) until it is acknowledged
                    try:
                        answer = await http.post(f"/api/v1/queues/{self.queue}/messages", json=body)
                    except httpx.TransportError:
                        await asyncio.sleep(0.2)
                        continue
                    if answer.status_code == 200:
                        self.acked.update(m["dedup_id"] for m in body["messages"])
                        break
                    if answer.status_code == 409 and answer.json()["code"] == "publish_in_progress":
                        # A killed gateway reserved these ids mid-publish: wait until the reservation lapses.
                        await asyncio.sleep(int(answer.headers["Retry-After"]))
                        continue
                    if answer.status_code == 409:  # some were stored by an attempt whose answer was lost
                        duplicates = {d["dedup_id"] for d in answer.json()["details"]["duplicates"]}
                        self.acked.update(duplicates)
                        body = {"messages": [m for m in body["messages"] if m["dedup_id"] not in duplicates]}
                        if not body["messages"]:
                            break
                        continue
                    # 502: the balancer's gateway died with the request; 503: no gateway, or a broker away.
                    assert answer.status_code in (502, 503, 429), answer.text
                    self.last_refusal[:] = [answer.text[:500]]
                    await asyncio.sleep(0.2)
                batch_number += 1

    async def _subscribe(self, index: int) -> None:
        url = self.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{self.queue}"
        while not self._stop.is_set():
            try:
                async with websockets.connect(url, additional_headers=self.headers, open_timeout=5) as ws:
                    self.connections[index] += 1
                    await ws.send(json.dumps({"type": "subscribe", "group": self.group, "prefetch": 50}))
                    while not self._stop.is_set():
                        frame = json.loads(await asyncio.wait_for(ws.recv(), 5))
                        if frame["type"] != "messages":
                            continue
                        if self.connections[index] > 1:
                            self.pushed_after_reconnect[index] += len(frame["messages"])
                        numbered = [(next(self.deliveries), m) for m in frame["messages"]]
                        self.last_delivered.update((m["value"], number) for number, m in numbered)
                        keep = [m for m in frame["messages"] if self._rng.random() < 0.3]  # never acked: must come back
                        self.kept.update((m["value"], self.last_delivered[m["value"]]) for m in keep)
                        done = [m["receipt"] for m in frame["messages"] if m not in keep]
                        await ws.send(json.dumps({"type": "ack", "receipts": done}))
            except (OSError, websockets.WebSocketException, TimeoutError):
                await asyncio.sleep(0.2)

    async def check(self, partitions: int) -> list[str]:
        """Drain the group over REST and read every partition: what went wrong (empty: nothing)."""
        import httpx

        seen: set[str] = set()
        async with httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=60) as http:
            base = f"/api/v1/queues/{self.queue}"
            empty_rounds = 0
            while empty_rounds < 3:
                answer = await http.post(f"{base}/groups/{self.group}/receive", json={"max_messages": 1000, "wait_seconds": 4})
                assert answer.status_code == 200, answer.text
                messages = answer.json()["messages"]
                empty_rounds = 0 if messages else empty_rounds + 1
                seen.update(m["value"] for m in messages)
                self.last_delivered.update((m["value"], next(self.deliveries)) for m in messages)
                if messages:
                    await http.post(f"{base}/groups/{self.group}/ack", json={"receipts": [m["receipt"] for m in messages]})
            stored = set()
            for partition in range(partitions):
                url = f"{base}/partitions/{partition}/messages"
                page = (await http.get(url, params={"from": "earliest", "max_messages": 1000})).json()
                while page["messages"]:
                    stored.update(m["value"] for m in page["messages"])
                    page = (await http.get(url, params={"offset": page["next_offset"], "max_messages": 1000})).json()
        problems = []
        missing = self.acked - stored
        if missing:
            problems.append(f"{len(missing)} acknowledged publishes are not in the queue, e.g. {sorted(missing)[:5]}")
        not_back = sorted(value for value, number in self.kept.items() if self.last_delivered[value] <= number)
        if not_back:
            problems.append(f"{len(not_back)} unacknowledged deliveries never came back, e.g. {not_back[:5]}")
        undelivered = self.acked - seen - set(self.last_delivered)
        if undelivered:
            problems.append(f"{len(undelivered)} acknowledged publishes were never delivered")
        return problems
