"""A look at a queue group (platform/lag/sampler.py) against a real broker: lag counts what is not yet accepted,
in flight what is delivered and not settled, the oldest unacknowledged age is that of the record at the group's
position, and the dead-letter depth what the queue's dead-letter topic holds."""

from __future__ import annotations

import time

from tideway_server.lag.sampler import QueueRef, sample_cluster

from tideway.native import Producer, TidewayClient
from tideway.native.queue import QueueConsumer

TOPIC = "t7.jobs"


async def test_a_queue_groups_look_has_its_in_flight_messages_oldest_age_and_dead_letters(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1, configs={"queue.max.deliveries": "1"})
        await client.create_topic(TOPIC + ".dlq", partitions=1)
    sent_ms = time.time() * 1000
    async with Producer(broker.bootstrap, acks="all") as producer:
        for i in range(20):
            await (await producer.send(TOPIC, b"job-%d" % i, partition=0))
    async with QueueConsumer(broker.bootstrap, "t7.queue.workers", TOPIC) as queue:
        got = []
        while len(got) < 5:
            got += await queue.receive(5 - len(got), wait_ms=500)
        await queue.reject(got[:2], error="poison")  # dead-lettered (one delivery allowed)
        held = got[2:]  # 3 in flight, never settled
        queue_ref = QueueRef(tenant_id=7, name="jobs", broker_topic=TOPIC, dead_letter_topic=TOPIC + ".dlq", partitions=1)
        async with TidewayClient(broker.bootstrap) as client:
            deadline = time.monotonic() + 10
            while True:
                (look,) = await sample_cluster(client, [queue_ref], {})
                if look["dead_letters"] == 2 or time.monotonic() > deadline:
                    break
        assert held
    assert (look["group"], look["kind"]) == ("workers", "queue")
    assert look["in_flight"] == 3
    assert look["lag"] == 18  # 20 published, 2 dead-lettered at the start of the log, 3 in flight still count
    assert look["dead_letters"] == 2
    # The oldest unacknowledged message is the first held one, sent about when the test began.
    assert abs(look["oldest_unacked_ms"] - (look["at_ms"] - sent_ms)) < 2000
    assert look["oldest_unacked_ms"] == look["lag_ms"]
