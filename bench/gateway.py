"""Benchmark the data gateway: REST publish, WebSocket push, publish-to-push latency.

Starts a whole deployment in a temporary directory (Redis, a controller, 3
brokers, a Celery worker and `tideway serve`, the same processes the tests
use), a tenant on the business plan (so rate limits do not bind) and a queue
with 3 partitions and replication factor 3 (publishes are acknowledged by
every in-sync replica). Then measures, with clients in this process:

* REST publish msgs/s: batches of 100 messages of 100 bytes from 8
  concurrent clients, each a keep-alive HTTP/1.1 connection with one request
  at a time. The clients are a lean load generator (asyncio streams and
  httptools' C response parser, as wrk or h2load would be): they share the
  cores with the servers, and httpx spent about 1.6 ms of CPU per request
  here, which capped this figure at about 40,000 msgs/s. Afterwards the
  queue's partition ends are read back: the run fails unless the brokers
  hold every acknowledged message (``stored_messages``);
* WebSocket push msgs/s to one subscriber and to 8 subscribers of one group
  (prefetch 1000, acking as they go), from a queue filled beforehand;
* publish-to-push latency p50/p99 at 1,000 msgs/s (one message per publish
  frame on a WebSocket; a second WebSocket subscribes, notes when each
  arrives and acknowledges it), after one message has gone through (the
  group's first receive sets up its state on the brokers: a one-time cost,
  not the steady state); also how long each publish took to be acknowledged
  (``publish_ack_*``), and each process's CPU and wake-ups per message
  (``per_message``: the gateway, each broker, the bench's clients...). Its
  two WebSockets are lean clients too
  (``LeanSocket``: asyncio streams and msgspec's JSON): with the `websockets`
  library they spent 0.28 ms of CPU per message here, which the servers,
  sharing the 2 cores, waited for (docs/benchmarks.md, the tenth sitting).

Prints one JSON object on stdout; progress goes to stderr. The clients share
the machine's cores with the servers.

    .venv/bin/python bench/gateway.py            # full run (about two minutes)
    .venv/bin/python bench/gateway.py --quick    # under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import gc
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

import httptools  # noqa: E402
import httpx  # noqa: E402
import msgspec  # noqa: E402
import websockets  # noqa: E402

from bench.common import CpuMeter, ProcessMeter, deployment_role, progress, settle  # noqa: E402
from tests.harness.control_plane import running_control_plane  # noqa: E402

VALUE = "x" * 100


class _Answer:
    """httptools' callbacks for one HTTP response."""

    def __init__(self) -> None:
        self.body: list[bytes] = []
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body.append(body)

    def on_message_complete(self) -> None:
        self.complete = True


class LeanSocket:
    """A minimal WebSocket client for the latency phase: text frames of JSON, each read whole.

    It sends frames masked with a zero key (RFC 6455 requires a mask from a
    client, not a secret one; a browser's is random to defeat cache poisoning
    by scripts, which a load generator is not), answers pings, and expects no
    fragmented or compressed frames (the gateway sends neither).
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        self._encode, self._decode = msgspec.json.encode, msgspec.json.decode

    @classmethod
    async def connect(cls, url: str, headers: dict) -> LeanSocket:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
        key = base64.b64encode(os.urandom(16)).decode()
        writer.write("".join([f"GET {parts.path} HTTP/1.1\r\n", f"Host: {parts.netloc}\r\n", "Upgrade: websocket\r\n",
                              "Connection: Upgrade\r\n", f"Sec-WebSocket-Key: {key}\r\n", "Sec-WebSocket-Version: 13\r\n",
                              *(f"{k}: {v}\r\n" for k, v in headers.items()), "\r\n"]).encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 101"):
            raise SystemExit(f"the gateway refused the WebSocket: {head[:200]!r}")
        return cls(reader, writer)

    def send(self, message: dict) -> None:
        payload = self._encode(message)
        size = len(payload)
        if size < 126:
            head = struct.pack("!BB", 0x81, 0x80 | size)
        elif size < 1 << 16:
            head = struct.pack("!BBH", 0x81, 0x80 | 126, size)
        else:
            head = struct.pack("!BBQ", 0x81, 0x80 | 127, size)
        self._writer.write(head + b"\0\0\0\0" + payload)  # the zero mask leaves the payload as it is

    async def recv(self) -> dict:
        """The next text message (pings are answered on the way)."""
        while True:
            first, second = await self._reader.readexactly(2)
            size = second & 0x7F
            if size == 126:
                size = struct.unpack("!H", await self._reader.readexactly(2))[0]
            elif size == 127:
                size = struct.unpack("!Q", await self._reader.readexactly(8))[0]
            payload = await self._reader.readexactly(size)
            opcode = first & 0x0F
            if opcode == 0x1 and first & 0x80:
                return self._decode(payload)
            if opcode == 0x9:  # ping: pong with its payload
                self._writer.write(struct.pack("!BB", 0x8A, 0x80 | len(payload)) + b"\0\0\0\0" + payload)
            elif opcode == 0x8:
                raise ConnectionError(f"the gateway closed the WebSocket: {payload[:2].hex()} {payload[2:]!r}")
            elif opcode != 0xA:
                raise SystemExit(f"unexpected WebSocket frame: opcode {opcode}, fin {first >> 7}")

    def close(self) -> None:
        self._writer.write(b"\x88\x82\0\0\0\0\x03\xe8")  # close, 1000 (normal), masked with zeros
        self._writer.close()


async def rest_publish(base_url: str, headers: dict, queue: str, *, clients: int, seconds: float) -> dict:
    body = json.dumps({"messages": [{"value": VALUE} for _ in range(100)]}).encode()  # built once, as a client would
    host, port = base_url.removeprefix("http://").split(":")
    request = "".join([f"POST /api/v1/queues/{queue}/messages HTTP/1.1\r\n", f"Host: {host}:{port}\r\n",
                       "Content-Type: application/json\r\n", *(f"{k}: {v}\r\n" for k, v in headers.items()),
                       f"Content-Length: {len(body)}\r\n\r\n"]).encode() + body
    sent = 0
    latencies = []
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        nonlocal sent
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                writer.write(request)
                answer = _Answer()
                parser = httptools.HttpResponseParser(answer)
                while not answer.complete:
                    data = await reader.read(1 << 16)
                    if not data:
                        raise SystemExit("publish failed: the server closed the connection")
                    parser.feed_data(data)
                if parser.get_status_code() != 200:
                    raise SystemExit(f"publish failed: {parser.get_status_code()} {b''.join(answer.body)[:200]!r}")
                latencies.append(time.perf_counter() - started)
                sent += 100
        finally:
            writer.close()

    with CpuMeter() as meter:
        await asyncio.gather(*(client() for _ in range(clients)))
    elapsed = meter.seconds
    return {"clients": clients, "batch": 100, "value_bytes": 100, "messages": sent, "seconds": round(elapsed, 2),
            "msgs_per_s": round(sent / elapsed), "cpu_s_per_million": meter.cpu_s_per_million(sent),
            "request_p50_ms": _percentile_ms(latencies, 0.5),
            "request_p99_ms": _percentile_ms(latencies, 0.99)}


async def fill(base_url: str, headers: dict, queue: str, count: int) -> None:
    body = {"messages": [{"value": VALUE} for _ in range(500)]}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        async def worker(n: int) -> None:
            for _ in range(n):
                assert (await http.post(f"/api/v1/queues/{queue}/messages", json=body)).status_code == 200
        batches = count // 500
        await asyncio.gather(*(worker(batches // 8 + (1 if i < batches % 8 else 0)) for i in range(8)))


async def ws_push(ws_url: str, headers: dict, *, subscribers: int, count: int) -> dict:
    received = 0
    done = asyncio.Event()
    started = time.perf_counter()
    finished = None

    async def subscriber() -> None:
        nonlocal received, finished
        async with websockets.connect(ws_url, additional_headers=headers, max_size=None) as ws:
            await ws.send(json.dumps({"type": "subscribe", "group": f"push-{subscribers}", "prefetch": 1000}))
            while not done.is_set():
                try:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 0.5))
                except TimeoutError:
                    continue  # look at `done` again
                if frame["type"] != "messages":
                    continue
                received += len(frame["messages"])
                await ws.send(json.dumps({"type": "ack", "receipts": [m["receipt"] for m in frame["messages"]]}))
                if received >= count and finished is None:
                    finished = time.perf_counter()
                    done.set()

    with CpuMeter() as meter:
        await asyncio.wait_for(asyncio.gather(*(subscriber() for _ in range(subscribers))), 300)
    elapsed = finished - started
    return {"subscribers": subscribers, "messages": received, "seconds": round(elapsed, 2), "msgs_per_s": round(received / elapsed),
            "cpu_s_per_million": meter.cpu_s_per_million(received)}


async def latency(ws_url: str, headers: dict, *, rate: int, seconds: float) -> dict:
    """Publish one message per frame on one WebSocket at ``rate``; a second one subscribes and notes arrivals."""
    arrivals: list[float] = []
    ready = asyncio.Event()

    async def subscriber() -> None:
        ws = await LeanSocket.connect(ws_url, headers)
        try:
            ws.send({"type": "subscribe", "group": "latency", "prefetch": 1000})
            while True:
                frame = await ws.recv()
                if frame["type"] == "subscribed":
                    ready.set()
                if frame["type"] != "messages":
                    continue
                now = time.time()
                arrivals.extend(now - float(m["value"]) for m in frame["messages"])
                ws.send({"type": "ack", "receipts": [m["receipt"] for m in frame["messages"]]})
        finally:
            ws.close()

    task = asyncio.ensure_future(subscriber())
    await asyncio.wait_for(ready.wait(), 10)
    total = int(rate * seconds)
    publisher = await LeanSocket.connect(ws_url, headers)
    try:
        await publisher.recv()  # ready
        publisher.send({"type": "publish", "messages": [{"value": repr(time.time())}]})
        await publisher.recv()  # published
        deadline = time.monotonic() + 30
        while not arrivals and time.monotonic() < deadline:  # the warm-up message went through
            await asyncio.sleep(0.01)
        arrivals.clear()

        sent_at = [0.0] * total
        acked_after = []

        async def drain() -> None:  # the "published" answers: how long the publish took to be acknowledged
            for _ in range(total):
                answer = await publisher.recv()
                acked_after.append(time.perf_counter() - sent_at[answer["id"]])

        answers = asyncio.ensure_future(drain())
        # As bench/peers.py does for the peers' clients: this process's start-up objects out of the
        # collector's full passes (one took 18 ms here, counted against the gateway).
        gc.collect()
        gc.freeze()
        meter = CpuMeter().__enter__()
        processes = ProcessMeter(deployment_role).__enter__()
        started = time.perf_counter()
        for sent in range(total):
            delay = started + sent / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            sent_at[sent] = time.perf_counter()
            publisher.send({"type": "publish", "id": sent, "messages": [{"value": repr(time.time())}]})
        await asyncio.wait_for(answers, 60)
    finally:
        publisher.close()
    deadline = time.monotonic() + 10
    while len(arrivals) < total and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    meter.__exit__(None, None, None)
    processes.__exit__(None, None, None)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    return {"rate_msgs_per_s": rate, "published": total, "pushed": len(arrivals), "cpu_s_per_million": meter.cpu_s_per_million(total),
            "p50_ms": _percentile_ms(arrivals, 0.5),
            "p99_ms": _percentile_ms(arrivals, 0.99), "max_ms": round(max(arrivals) * 1000, 2),
            "publish_ack_p50_ms": _percentile_ms(acked_after, 0.5), "publish_ack_p99_ms": _percentile_ms(acked_after, 0.99),
            # Where the CPU went: each process's CPU µs and wake-ups per message (the busiest broker
            # coordinates the queue's group).
            "per_message": processes.per_message(total)}


def _percentile_ms(seconds: list[float], fraction: float) -> float:
    ordered = sorted(seconds)
    return round(ordered[int(len(ordered) * fraction)] * 1000, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="shorter phases (under a minute)")
    parser.add_argument("--phases", default="rest,push,latency", help="which phases, comma-separated (default %(default)s)")
    parser.add_argument("--seconds", type=float, help="length of the REST and latency phases (default 15, 5 with --quick)")
    args = parser.parse_args()
    phases = set(args.phases.split(","))
    if phases - {"rest", "push", "latency"}:
        parser.error(f"unknown phases: {', '.join(sorted(phases - {'rest', 'push', 'latency'}))}")
    seconds = args.seconds or (5 if args.quick else 15)
    push_count = 50_000 if args.quick else 200_000
    with tempfile.TemporaryDirectory(prefix="tideway-bench-gateway-") as home:
        progress("starting Redis, controller, 3 brokers, a Celery worker and the gateway")
        with running_control_plane(Path(home), f"sqlite://{home}/control.sqlite3") as plane:
            _, key = plane.create_tenant(plan="business")
            headers = {"Authorization": f"Bearer {key}"}
            with plane.client(key) as api:
                for name in ("publish", "push1", "push8", "latency"):
                    answer = api.post("/api/v1/queues/", json={"name": name, "partitions": 3, "replication_factor": 3})
                    assert answer.status_code == 201, answer.text
            ws_base = plane.base_url.replace("http://", "ws://") + "/ws/v1/queues/"
            result = {"machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, "quick": args.quick}
            if "rest" in phases:
                settle()
                progress(f"REST publish, 8 clients, batches of 100, {seconds} s")
                result["rest_publish"] = asyncio.run(rest_publish(plane.base_url, headers, "publish", clients=8, seconds=seconds))
                with plane.client(key) as api:  # the queue was empty: its partitions' ends count what the brokers stored
                    ends = [api.get(f"/api/v1/queues/publish/partitions/{p}/offsets").json()["latest"] for p in range(3)]
                result["rest_publish"]["stored_messages"] = sum(ends)
                if sum(ends) < result["rest_publish"]["messages"]:
                    raise SystemExit(f"the brokers hold {sum(ends)} messages, fewer than the {result['rest_publish']['messages']} acknowledged")
            if "push" in phases:
                progress(f"filling queues with {push_count} messages each for the push phases")
                asyncio.run(fill(plane.base_url, headers, "push1", push_count))
                asyncio.run(fill(plane.base_url, headers, "push8", push_count))
                settle()
                progress("WebSocket push to 1 subscriber")
                result["ws_push_1"] = asyncio.run(ws_push(ws_base + "push1", headers, subscribers=1, count=push_count))
                settle()
                progress("WebSocket push to 8 subscribers")
                result["ws_push_8"] = asyncio.run(ws_push(ws_base + "push8", headers, subscribers=8, count=push_count))
            if "latency" in phases:
                settle()
                progress(f"publish-to-push latency at 1,000 msgs/s for {seconds} s")
                result["latency"] = asyncio.run(latency(ws_base + "latency", headers, rate=1000, seconds=seconds))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
