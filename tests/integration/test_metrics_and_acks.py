"""Prometheus metrics of a live broker, and fire-and-forget produce (acks=0)."""

import subprocess
import sys
import urllib.request

from tests.harness.processes import OPERATOR_KEY, REPO_ROOT, free_port
from tideway.native import Consumer, Producer, TidewayClient


def scrape_text(port: int, token: str | None = OPERATOR_KEY) -> str:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    request = urllib.request.Request(f"http://127.0.0.1:{port}/metrics", headers=headers)
    return urllib.request.urlopen(request, timeout=5).read().decode()


def scrape(port: int, token: str | None = OPERATOR_KEY) -> dict[str, float]:
    text = scrape_text(port, token)
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


async def test_metrics_count_messages_bytes_requests_and_log_size(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("metered", partitions=2)
        async with Producer(client) as producer:
            for i in range(25):
                await producer.send("metered", b"m%d" % i, partition=i % 2)
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([("metered", 0), ("metered", 1)], start="earliest")
        seen = 0
        while seen < 25:
            seen += sum(len(r) for r in (await consumer.getmany(timeout_ms=2000)).values())
        await consumer.stop()
    metrics = scrape(metrics_port)
    assert metrics['tideway_messages_in_total{topic="metered"}'] == 25
    assert metrics['tideway_messages_out_total{topic="metered"}'] == 25
    assert metrics['tideway_bytes_in_total{topic="metered"}'] > 25 * 2
    assert metrics['tideway_log_end_offset{partition="0",topic="metered"}'] == 13
    assert metrics['tideway_log_end_offset{partition="1",topic="metered"}'] == 12
    assert metrics['tideway_log_size_bytes{partition="0",topic="metered"}'] > 0
    assert metrics['tideway_request_latency_seconds_count{api="PRODUCE"}'] >= 1
    assert metrics['tideway_request_latency_seconds_count{api="FETCH"}'] >= 1


async def test_an_unauthenticated_scrape_names_no_tenant(broker_factory):
    """Issue 40: the metrics port answered anyone with tenants' topic names. Without a service key as bearer
    token (or with a wrong one), a scrape holds only the families that name no topic."""
    metrics_port = free_port()
    broker = broker_factory(extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("t2.ledger", partitions=1)
        async with Producer(client, acks="all") as producer:
            await producer.send_and_wait("t2.ledger", b"entry")
    forged = OPERATOR_KEY[:-4] + ("0000" if not OPERATOR_KEY.endswith("0000") else "1111")
    for token in (None, "tw_000000000000_guess", forged):
        text = scrape_text(metrics_port, token)
        assert "tideway_request_latency_seconds_count" in text  # the broker's health is still there
        assert "t2." not in text and "topic=" not in text, text
    full = scrape_text(metrics_port)
    assert 'tideway_messages_in_total{topic="t2.ledger"} 1.0' in full
    # The key an operator gives Prometheus (on Kubernetes too): printed from the cluster secret.
    printed = subprocess.run([sys.executable, "-m", "tideway_server.cli.main", "cluster", "metrics-token"], cwd=REPO_ROOT,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert printed.startswith("tws_metrics_")
    assert 'tideway_messages_in_total{topic="t2.ledger"} 1.0' in scrape_text(metrics_port, printed)


async def test_acks_zero_writes_without_an_answer(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("fire")
        async with Producer(client, acks=0) as producer:
            futures = [await producer.send("fire", b"f%d" % i) for i in range(50)]
            results = [await future for future in futures]
        assert all(r.offset == -1 for r in results)  # acks=0: the broker sends no offsets back
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([("fire", 0)], start="earliest")
        values = []
        while len(values) < 50:
            batch = await consumer.getmany(timeout_ms=3000)
            assert batch, "acks=0 records never arrived"
            values += [r.value for records in batch.values() for r in records]
        await consumer.stop()
        assert values == [b"f%d" % i for i in range(50)]
