"""Deleting records (DeleteRecords, what a queue's purge is made of) on a replicated cluster.

Three brokers, a queue of 3 partitions replicated three times, a group holding messages in its window
(some received and not acknowledged): deleting below the high watermark answers once every in-sync
replica has moved its log start there, the group receives none of the deleted messages (its coordinator
is remote to some of the partitions), messages published afterwards come as usual, and a new leader
after the old one is killed starts where the purge left the log.
"""

from __future__ import annotations

import asyncio

import pytest
from tideway_server.brokers.queues.window import LOG_START_CHECK_S

from tideway.native import Producer, TidewayClient
from tideway.native.queue import QueueConsumer
from tideway.protocol import errors
from tideway.protocol import messages as m

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

TOPIC = "orders"
PARTITIONS = 3


async def test_deleted_records_are_gone_on_every_replica_from_the_queue_and_after_a_failover(deployment_factory):
    deployment = deployment_factory(brokers=3)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        await deployment.wait_until(
            lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS,
            what="orders in sync")
        async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
            for i in range(60):
                await (await producer.send(TOPIC, b"old %d" % i, partition=i % PARTITIONS))

        async with QueueConsumer(deployment.bootstrap, "workers", TOPIC) as queue:
            held = await queue.receive(5, wait_ms=2_000)  # in flight, never acknowledged
            assert held and all(message.value.startswith(b"old") for message in held)

            starts = [await client.delete_records(TOPIC, partition) for partition in range(PARTITIONS)]
            assert starts == [20] * PARTITIONS  # below the high watermark: everything there was
            for partition in range(PARTITIONS):
                assert await client.list_offset(TOPIC, partition, m.EARLIEST_TIMESTAMP) == (20, -1)
                with pytest.raises(errors.OffsetOutOfRangeError):
                    await client.fetch(TOPIC, partition, 0, retry_for_s=0)
            # Answered once every in-sync replica had deleted them: each broker's own replica says so.
            for broker in deployment.brokers.values():
                async with TidewayClient(broker.bootstrap) as local:
                    (topic,) = await local.describe_topics([TOPIC])
                    assert [p.log_start_offset for p in topic.partitions] == [20] * PARTITIONS

            # The group's window forgets them (a remote leader's within LOG_START_CHECK_S).
            await asyncio.sleep(LOG_START_CHECK_S + 0.5)
            assert await queue.receive(10, wait_ms=1_000) == []
            async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
                for i in range(6):
                    await (await producer.send(TOPIC, b"new %d" % i, partition=i % PARTITIONS))
            got = []
            for _ in range(20):
                messages = await queue.receive(10, wait_ms=1_000)
                got += messages
                await queue.ack(messages)
                if len(got) >= 6:
                    break
            assert sorted(message.value for message in got) == [b"new %d" % i for i in range(6)]

        with pytest.raises(errors.OffsetOutOfRangeError):
            await client.delete_records(TOPIC, 0, 1_000)  # past the high watermark: refused, nothing changes

    state = await deployment.describe()
    leader = deployment.partition(state, TOPIC, 0).leader
    deployment.brokers[leader].kill()
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).leader not in (leader, -1),
                                what="a new leader of orders-0")
    async with TidewayClient(deployment.bootstrap) as client:
        assert (await client.list_offset(TOPIC, 0, m.EARLIEST_TIMESTAMP, retry_for_s=20))[0] == 20
        records = (await client.fetch(TOPIC, 0, 20, retry_for_s=20)).records
        assert records  # the message published after the purge is still there
