"""Metering through a broker crash (issue 17): a controller and three brokers; a producer and a consumer
run while the leader of a partition is SIGKILLed and restarted. Ingress metered equals what the logs hold,
exactly (the restarted or new leader meters the tail the dead one had not reported); egress is never
above what the consumer received, and short by at most what was served in the last flush interval."""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.usage_records import read_usage, totals
from tideway.native import Consumer, Producer, TidewayClient
from tideway.protocol import messages as m

TOPIC = "t9.jobs"
PARTITIONS = 3


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
async def test_ingress_stays_exact_and_egress_is_never_counted_twice_through_a_leader_kill(deployment_factory):
    deployment = deployment_factory(brokers=3, session_timeout_ms=2000)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
    await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS, what="topic created")

    stop = asyncio.Event()
    deliveries: list[tuple[float, int]] = []  # (when, how many records) as the consumer received them

    async def produce() -> None:
        async with Producer(deployment.bootstrap, acks="all", linger_ms=5) as producer:
            sequence = 0
            while not stop.is_set():
                for _ in range(10):
                    await producer.send(TOPIC, b"job-%09d" % sequence, partition=sequence % PARTITIONS)
                    sequence += 1
                await asyncio.sleep(0.01)

    async def consume() -> None:
        consumer = Consumer(deployment.bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        await consumer.assign([(TOPIC, p) for p in range(PARTITIONS)], start="earliest")
        quiet = 0
        while not stop.is_set() or quiet < 4:
            batch = await consumer.getmany(timeout_ms=500)
            count = sum(len(records) for records in batch.values())
            quiet = 0 if count else quiet + 1
            if count:
                deliveries.append((time.monotonic(), count))
        await consumer.stop()

    tasks = [asyncio.ensure_future(produce()), asyncio.ensure_future(consume())]
    await asyncio.sleep(3)
    victim = deployment.brokers[deployment.partition(await deployment.describe(), TOPIC, 0).leader]
    victim.kill()
    killed_at = time.monotonic()
    await asyncio.sleep(3)
    victim.restart()
    await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS,
        timeout_s=30, what="every replica back in sync")
    await asyncio.sleep(2)
    stop.set()
    await asyncio.gather(*tasks)
    await asyncio.sleep(3)  # every broker flushes what it metered (once a second)

    async with TidewayClient(deployment.bootstrap) as client:
        stored = 0
        for partition in range(PARTITIONS):
            stored += (await client.list_offset(TOPIC, partition, m.LATEST_TIMESTAMP))[0]
        metered = totals(await read_usage(client), TOPIC)
    delivered = sum(count for _when, count in deliveries)
    assert stored > 1_000
    assert metered["messages_in"] == stored, metered  # exact: what the logs hold, metered once
    assert metered["messages_out"] <= delivered  # never counted twice
    served_just_before = sum(count for when, count in deliveries if killed_at - 1.5 <= when <= killed_at + 0.5)
    assert metered["messages_out"] >= delivered - served_just_before, (metered, delivered, served_just_before)
