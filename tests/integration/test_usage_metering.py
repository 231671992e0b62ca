"""Metering at the source (issue 17): brokers write what tenants used to ``__usage`` once a second;
ingress is exact, egress never counted twice, duplicates change nothing."""

from __future__ import annotations

import asyncio
import json
import time

from tideway_server.brokers.usage_topic import USAGE_TOPIC

from tests.usage_records import read_usage, totals
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.traffic import describe_traffic


async def _wait_for(client, topic: str, want: dict, timeout_s: float = 15) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        got = totals(await read_usage(client), topic)
        if all(got[k] == v for k, v in want.items()) or time.monotonic() > deadline:
            return got
        await asyncio.sleep(0.5)


async def test_a_broker_meters_what_a_tenant_sent_and_read_exactly_once(broker_factory):
    broker = broker_factory(extra_args=["--usage-storage-interval-s", "1"])
    topic = "t7.orders"
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(topic, partitions=2)
        async with Producer(client, acks="all") as producer:
            for i in range(50):
                await producer.send(topic, b"x" * (10 + i), key=b"k%d" % i, partition=i % 2)
        consumer = Consumer(client, auto_offset_reset="earliest")
        await consumer.start()
        await consumer.assign([(topic, 0), (topic, 1)], start="earliest")
        seen = 0
        while seen < 50:
            seen += sum(len(r) for r in (await consumer.getmany(timeout_ms=2000)).values())
        await consumer.stop()
        counters = (await describe_traffic(client, [topic])).topics[topic]
        got = await _wait_for(client, topic, {"messages_in": 50, "messages_out": 50})
        assert got == {"messages_in": 50, "bytes_in": counters[1], "messages_out": 50, "bytes_out": counters[3]}
        records = await read_usage(client)
        assert all(r["id"].startswith("broker-1:") for r in records)
        stored = [r for r in records if any(row[0] == topic for row in r["storage"])]
        assert stored and all(row[2] >= 0 for r in stored for row in r["storage"])  # byte-seconds sampled

        # Replayed records (a producer's retry, an operator's mistake) change nothing: ids are deterministic.
        async with Producer(client, acks="all") as producer:
            for record in records:
                await producer.send(USAGE_TOPIC, json.dumps(record).encode(), key=b"replay")
        assert totals(await read_usage(client), topic) == got


async def test_what_an_aborted_transaction_wrote_is_metered_as_ingress_and_never_as_egress(broker_factory):
    """Issue 44: an aborted transaction's records were stored and replicated (they used disk and bandwidth): they
    count as messages in; read_committed readers never get them, so they never count as messages out. The
    markers are no messages either way."""
    from tideway.native import TransactionalProducer
    from tideway.record.markers import build_marker

    broker = broker_factory(extra_args=["--usage-storage-interval-s", "1"])
    topic = "t7.ledger"
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(topic, partitions=2)
        async with TransactionalProducer(client, "t7.txn.ledger-writer", linger_ms=1) as producer:
            producer.begin()
            await producer.send_many(topic, [(b"aborted %d" % i, None, [], i % 2) for i in range(30)])
            await producer.abort()
            producer.begin()
            await producer.send_many(topic, [(b"committed %d" % i, None, [], i % 2) for i in range(20)])
            await producer.commit()
        async with Consumer(client, isolation_level="read_committed") as consumer:
            await consumer.assign([(topic, 0), (topic, 1)], start="earliest")
            values: list[bytes] = []
            deadline = time.monotonic() + 15
            while len(values) < 20 and time.monotonic() < deadline:
                values += [r.value for records in (await consumer.getmany(1000)).values() for r in records]
            values += [r.value for records in (await consumer.getmany(500)).values() for r in records]  # no more
        assert sorted(values) == sorted(b"committed %d" % i for i in range(20))
        counters = (await describe_traffic(client, [topic])).topics[topic]
        got = await _wait_for(client, topic, {"messages_in": 50, "messages_out": 20})
        # Bytes in: every batch stored, the aborted ones too, and the four markers (stored bytes, no messages;
        # the live traffic counters leave them out).
        marker_bytes = len(build_marker(1, 0, commit=True, coordinator_epoch=0, timestamp_ms=int(time.time() * 1000)))
        assert got == {"messages_in": 50, "bytes_in": counters[1] + 4 * marker_bytes, "messages_out": 20,
                       "bytes_out": counters[3]}
        assert counters[1] > sum(len(b"aborted %d" % i) for i in range(30))
