"""The bill's truth, end to end (issue 17): two tenants send over REST, WebSocket and the native protocol and read
natively; the brokers and the gateway meter; the usage job (Spark) rolls up and prices; what the API and the
invoice show equals what was sent and read: messages exactly, bytes in as the logs hold them, bytes out as the
consumers received them. The same offsets read again give the same rows. And the same with a broker SIGKILLed
mid-traffic: ingress exact, egress never above what was delivered."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
import websockets

from tests.harness.gateway import make_queue
from tests.harness.processes import OPERATOR_KEY, REPO_ROOT
from tideway.native import Producer, QueueConsumer, TidewayClient
from tideway.protocol import messages as m
from tideway.record.batch import iter_batches

pytestmark = pytest.mark.timeout(600)


def _rest_publish(gateway, key: str, name: str, batches: list[list[str]]) -> None:
    with gateway.client(key) as api:
        for values in batches:
            answer = api.post(f"/api/v1/queues/{name}/messages", json={"messages": [{"value": v} for v in values]})
            assert answer.status_code == 200, answer.text


async def _ws_publish(gateway, key: str, name: str, values: list[str]) -> None:
    url = gateway.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{name}"
    async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
        await ws.recv()  # ready
        await ws.send(json.dumps({"type": "publish", "id": 1, "messages": [{"value": v} for v in values]}))
        assert json.loads(await ws.recv())["type"] == "published"


async def _native(gateway, key: str, name: str, values: list[bytes], expected: int) -> int:
    """Produce ``values`` natively, then receive and accept everything; the bytes delivered (key, value, headers)."""
    async with TidewayClient(gateway.deployment.bootstrap, api_key=key) as client:
        async with Producer(client, acks="all") as producer:
            for value in values:
                await producer.send(name, value, key=b"k")
        delivered, size = 0, 0
        async with QueueConsumer(client, "billing", name) as queue:
            deadline = time.monotonic() + 60
            while delivered < expected and time.monotonic() < deadline:
                got = await queue.receive(100, wait_ms=1000)
                await queue.ack(got)
                delivered += len(got)
                size += sum(len(g.key or b"") + len(g.value or b"")
                            + sum(len(h) + len(v or b"") for h, v in g.headers) for g in got)
        assert delivered == expected
        return size


async def _stored_bytes(bootstrap: str, topic: str) -> int:
    """The bytes of every batch the topic's logs hold (what ingress meters)."""
    total = 0
    async with TidewayClient(bootstrap, api_key=OPERATOR_KEY) as client:
        for info in await client.partitions_for(topic):
            end, _ = await client.list_offset(topic, info.partition, m.LATEST_TIMESTAMP)
            offset = 0
            while offset < end:
                # As an inspector: the platform's own look, not consumption (it would be metered as egress).
                result = await client.fetch(topic, info.partition, offset, max_bytes=1 << 20, replica_id=m.INSPECTOR)
                for _position, base, size in iter_batches(result.records):
                    if base >= offset:
                        total += size
                    offset = max(offset, base + 1)
                offset = max(offset, _next(result.records))
    return total


def _next(records: bytes) -> int:
    from tideway.record.batch import read_header

    last = 0
    for position, _base, _size in iter_batches(records):
        last = read_header(records, position).next_offset
    return last


def test_two_tenants_usage_and_invoices_equal_what_they_sent_and_read(gateway):
    tenants = {}
    for label, rest, socket, native in (("a", [[f"a-rest-{i}-{j}" for j in range(10)] for i in range(3)],
                                         [f"a-ws-{i}" for i in range(5)], [b"a-native-%d" % i for i in range(7)]),
                                        ("b", [[f"b-rest-{i}-{j:03d}" for j in range(4)] for i in range(2)],
                                         [], [b"b-native-%d" % i for i in range(3)])):
        _slug, key = gateway.create_tenant(plan="team")
        name = make_queue(gateway, key, partitions=2)
        _rest_publish(gateway, key, name, rest)
        if socket:
            asyncio.run(_ws_publish(gateway, key, name, socket))
        sent = sum(len(b) for b in rest) + len(socket) + len(native)
        delivered_bytes = asyncio.run(_native(gateway, key, name, native, sent))
        tenants[label] = {"key": key, "name": name, "messages": sent, "bytes_out": delivered_bytes}

    async def topics() -> dict[str, str]:
        async with TidewayClient(gateway.deployment.bootstrap, api_key=OPERATOR_KEY) as client:
            names = await client.list_topics()
        return {label: next(t for t in names if t.endswith("." + t_["name"])) for label, t_ in tenants.items()}

    broker_topics = asyncio.run(topics())
    for label, topic in broker_topics.items():
        tenants[label]["bytes_in"] = asyncio.run(_stored_bytes(gateway.deployment.bootstrap, topic))
    time.sleep(3)  # the brokers and the gateway flush what they metered once a second

    def job(*extra: str) -> dict:
        done = subprocess.run([sys.executable, "manage.py", "spark_job", "usage_billing", "--master", "local[2]", "--invoices",
                               *extra], cwd=REPO_ROOT, env={**gateway.env, "TIDEWAY_LOG_LEVEL": "WARNING"},
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout.strip().splitlines()[-1])

    first = job()
    for label, t in tenants.items():
        with gateway.client(t["key"]) as api:
            usage = api.get("/api/v1/usage", params={"group_by": "queue"}).json()
            invoices = api.get("/api/v1/invoices/").json()
            lines = api.get(f"/api/v1/invoices/{invoices[0]['id']}").json()["lines"]
        figures: dict[str, int] = {}
        for point in usage["series"]:
            if point.get("queue") == t["name"]:
                figures[point["metric"]] = figures.get(point["metric"], 0) + point["value"]
        assert figures["messages_in"] == t["messages"] and figures["messages_out"] == t["messages"], (label, figures)
        assert figures["bytes_in"] == t["bytes_in"], (label, figures, t)  # as the logs hold them
        assert figures["bytes_out"] == t["bytes_out"], (label, figures, t)  # as the consumer received them
        billed = {line["metric"]: line["quantity"] for line in lines if line["kind"] == "usage"}
        assert billed["bytes_in"] == t["bytes_in"] and billed["bytes_out"] == t["bytes_out"], (label, billed)
        assert {line["kind"] for line in lines} >= {"plan", "usage"}
    again = job("--same-as", str(first["run"]))
    assert again["digest"] == first["digest"] and again["rows"] == first["rows"]


def _delivered_bytes(got) -> int:
    return sum(len(g.key or b"") + len(g.value or b"") + sum(len(h) + len(v or b"") for h, v in g.headers) for g in got)


def test_a_broker_killed_mid_traffic_leaves_ingress_exact_and_egress_short_by_at_most_one_flush(gateway):
    """The same chain with the leader of a partition SIGKILLed and restarted while a tenant produces and a queue
    consumer receives: after the job, ingress equals what the logs hold; egress is never above what was delivered,
    and short by at most what was delivered around the kill (the victim's last flush interval)."""
    from tideway.protocol import errors

    _slug, key = gateway.create_tenant(plan="team")
    name = make_queue(gateway, key, partitions=2)
    deployment = gateway.deployment
    stop = asyncio.Event()
    deliveries: list[tuple[float, int, int]] = []  # (when, messages, bytes) as the consumer received them
    failures = (errors.TidewayError, OSError, asyncio.TimeoutError)

    async def produce() -> None:
        async with Producer(deployment.bootstrap, api_key=key, acks="all", linger_ms=5) as producer:
            sequence = 0
            while not stop.is_set():
                for _ in range(10):
                    await producer.send(name, b"job-%09d" % sequence, key=b"k%d" % (sequence % 7))
                    sequence += 1
                await asyncio.sleep(0.01)

    async def consume() -> None:
        async with TidewayClient(deployment.bootstrap, api_key=key) as client:
            async with QueueConsumer(client, "billing", name) as queue:
                quiet = 0
                while not stop.is_set() or quiet < 4:
                    try:
                        got = await queue.receive(100, wait_ms=500)
                        if got:
                            deliveries.append((time.monotonic(), len(got), _delivered_bytes(got)))
                            await queue.ack(got)
                    except failures:
                        got = []
                        await asyncio.sleep(0.2)  # the partition's leader is moving
                    quiet = 0 if got else quiet + 1

    async def traffic() -> tuple[str, float]:
        async with TidewayClient(deployment.bootstrap, api_key=OPERATOR_KEY) as client:
            topic = next(t for t in await client.list_topics() if t.endswith("." + name))
        tasks = [asyncio.ensure_future(produce()), asyncio.ensure_future(consume())]
        await asyncio.sleep(3)
        victim = deployment.brokers[deployment.partition(await deployment.describe(), topic, 0).leader]
        victim.kill()
        killed_at = time.monotonic()
        await asyncio.sleep(3)
        victim.restart()
        await deployment.wait_until(lambda s: sum(1 for p in s.partitions if p.topic == topic and len(p.isr) == 3) == 2,
                                    timeout_s=60, what="every replica back in sync")
        await asyncio.sleep(2)
        stop.set()
        await asyncio.gather(*tasks)
        return topic, killed_at

    topic, killed_at = asyncio.run(traffic())

    async def stored_messages() -> int:
        async with TidewayClient(deployment.bootstrap, api_key=OPERATOR_KEY) as client:
            return sum([(await client.list_offset(topic, p, m.LATEST_TIMESTAMP))[0] for p in range(2)])

    stored, stored_bytes = asyncio.run(stored_messages()), asyncio.run(_stored_bytes(deployment.bootstrap, topic))
    time.sleep(3)  # every broker flushes what it metered (once a second)
    done = subprocess.run([sys.executable, "manage.py", "spark_job", "usage_billing", "--master", "local[2]", "--invoices"],
                          cwd=REPO_ROOT, env={**gateway.env, "TIDEWAY_LOG_LEVEL": "WARNING"}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    with gateway.client(key) as api:
        usage = api.get("/api/v1/usage", params={"group_by": "queue"}).json()
        invoice = api.get("/api/v1/invoices/").json()[0]
        lines = api.get(f"/api/v1/invoices/{invoice['id']}").json()["lines"]
    figures: dict[str, int] = {}
    for point in usage["series"]:
        if point.get("queue") == name:
            figures[point["metric"]] = figures.get(point["metric"], 0) + point["value"]
    delivered = sum(n for _when, n, _size in deliveries)
    delivered_bytes = sum(size for _when, _n, size in deliveries)
    near_kill = [(n, size) for when, n, size in deliveries if killed_at - 1.5 <= when <= killed_at + 0.5]
    assert stored > 1_000 and delivered > 1_000
    assert figures["messages_in"] == stored and figures["bytes_in"] == stored_bytes, (figures, stored, stored_bytes)
    assert delivered - sum(n for n, _ in near_kill) <= figures["messages_out"] <= delivered, (figures, delivered, near_kill)
    assert delivered_bytes - sum(s for _, s in near_kill) <= figures["bytes_out"] <= delivered_bytes, (figures, delivered_bytes)
    billed = {line["metric"]: line["quantity"] for line in lines if line["kind"] == "usage"}
    assert billed["bytes_in"] == stored_bytes and billed["bytes_out"] == figures["bytes_out"], billed
