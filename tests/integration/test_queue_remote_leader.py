"""A queue group's coordinator follows partitions led by other brokers with fetches that stream (issue 19).

Two brokers and a queue with a partition led on each, so the group's coordinator reads one of them
from the other broker. Messages published one at a time while a receiver waits each arrive once,
in order per partition (the coordinator's fetch of the remote leader stays open and answers each
one), and a message published after that fetch ran out (``WATCH_WAIT_MS`` of quiet) still comes.
"""

from __future__ import annotations

import asyncio

import pytest
from tideway_server.brokers.queues.remote_leaders import WATCH_WAIT_MS

from tideway.native import Producer, TidewayClient
from tideway.native.queue import QueueConsumer

pytestmark = [pytest.mark.timeout(180), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]


async def test_messages_from_a_remote_leader_arrive_once_in_order_and_after_a_quiet_spell(deployment_factory):
    deployment = deployment_factory(brokers=2)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic("jobs", partitions=2, replication_factor=1)
    state = await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == "jobs" and p.leader > 0) == 2, what="leaders of jobs")
    assert len({p.leader for p in state.partitions if p.topic == "jobs"}) == 2  # one partition is remote to the coordinator

    got: dict[int, list[bytes]] = {0: [], 1: []}

    async def receive_until(count: int) -> None:
        while sum(map(len, got.values())) < count:
            messages = await queue.receive(10, wait_ms=2_000)
            for message in messages:
                got[message.partition].append(message.value)
            await queue.ack(messages)

    async with QueueConsumer(deployment.bootstrap, "workers", "jobs") as queue, \
            Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
        receiving = asyncio.ensure_future(receive_until(60))
        await asyncio.sleep(0.5)  # the receiver waits
        for i in range(60):
            await (await producer.send("jobs", b"m%d" % i, partition=i % 2))
            await asyncio.sleep(0.01)
        await asyncio.wait_for(receiving, 60)
        assert got == {p: [b"m%d" % i for i in range(p, 60, 2)] for p in (0, 1)}

        await asyncio.sleep(WATCH_WAIT_MS / 1000 + 1)  # the coordinator's streaming fetches ran out
        receiving = asyncio.ensure_future(receive_until(62))
        for partition in (0, 1):
            await (await producer.send("jobs", b"late", partition=partition))
        await asyncio.wait_for(receiving, 30)
    assert got == {p: [b"m%d" % i for i in range(p, 60, 2)] + [b"late"] for p in (0, 1)}
