"""Lag in seconds for every partition, with many lagging partitions on every broker and two tenants (issue 40).

Rule: a look gives every lagging partition the age of its first unconsumed record, however many partitions lag
on one broker and whoever owns them. The look once asked each leader with one FETCH whose request-wide byte
limit was 1, so only the first partition of each request got a time and every other one read 0.

Real processes: a controller and three brokers; two tenants with a 6-partition queue each (so every broker
leads about two partitions of each), records written with times the test chooses, two stream groups per
tenant committed at positions the test chooses, and a queue group with records held in flight. Every
partition's figure is compared with the time of the record at the group's position.
"""

from __future__ import annotations

import pytest

from brokers.client import Producer, TidewayClient
from brokers.client.group import CoordinatorLink, commit_offsets
from brokers.client.queue import QueueConsumer
from lag.sampler import QueueRef, sample_cluster
from tests.conftest import OPERATOR_KEY

pytestmark = [pytest.mark.timeout(300), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

PARTITIONS = 6
RECORDS = 40  # per partition, in batches of 8
DEAD_LETTERS = 5
NOW_MS = 1_800_000_000_000  # the look's clock, so every age is exact
QUEUES = [QueueRef(tenant_id=1, name="orders", broker_topic="t1.orders", dead_letter_topic="", partitions=PARTITIONS),
          QueueRef(tenant_id=2, name="events", broker_topic="t2.events", dead_letter_topic="t2.events.dlq",
                   partitions=PARTITIONS)]


def _stamp(topic: str, partition: int, offset: int) -> int:
    """The time the test gives each record: different per topic, partition and offset."""
    return NOW_MS - 3_600_000 + (1 if topic.startswith("t2.") else 0) * 500_000 + partition * 60_000 + offset * 1_000


def _position(group: int, partition: int) -> int:
    """Where stream group ``group`` (0 or 1) committed on ``partition``: mid-batch, never the end."""
    return (3 + 7 * group + 5 * partition) % (RECORDS - 1)


async def test_every_lagging_partition_on_every_broker_gets_its_true_age(deployment_factory):
    deployment = deployment_factory(brokers=3)
    async with TidewayClient(deployment.bootstrap, api_key=OPERATOR_KEY) as client:
        for queue in QUEUES:
            await client.create_topic(queue.broker_topic, partitions=PARTITIONS, replication_factor=2)
            if queue.dead_letter_topic:
                await client.create_topic(queue.dead_letter_topic, partitions=1, replication_factor=2)
        async with Producer(client, acks="all", linger_ms=0) as producer:
            for queue in QUEUES:
                for partition in range(PARTITIONS):
                    for first in range(0, RECORDS, 8):
                        futures = [await producer.send(queue.broker_topic, b"r%d" % offset, partition=partition,
                                                       timestamp_ms=_stamp(queue.broker_topic, partition, offset))
                                   for offset in range(first, first + 8)]
                        await producer.flush()
                        assert [(await f).offset for f in futures] == list(range(first, first + 8))
            for i in range(DEAD_LETTERS):  # tenant 2's dead-letter depth, known
                await producer.send("t2.events.dlq", b"dead-%d" % i, partition=0)
            await producer.flush()
        for queue in QUEUES:
            for group in (0, 1):
                link = CoordinatorLink(client, f"t{queue.tenant_id}.stream.g{group}")
                await commit_offsets(link, {(queue.broker_topic, p): _position(group, p) for p in range(PARTITIONS)})
        await client.refresh_metadata()
        leaders = {}
        for queue in QUEUES:
            for partition in range(PARTITIONS):
                leader = client.leader_for(queue.broker_topic, partition)
                leaders.setdefault(leader, set()).add(queue.tenant_id)
        # The world the rule is about: several lagging partitions of both tenants on every broker.
        assert len(leaders) == 3 and all(tenants == {1, 2} for tenants in leaders.values()), leaders

    # Tenant 2's queue group holds 3 records of every partition in flight: its oldest unacknowledged is at 0.
    async with QueueConsumer(deployment.bootstrap, "t2.queue.workers", "t2.events", api_key=OPERATOR_KEY) as workers:
        held = []
        while len(held) < 3 * PARTITIONS:
            held += await workers.receive(3 * PARTITIONS - len(held), wait_ms=500)
        async with TidewayClient(deployment.bootstrap, api_key=OPERATOR_KEY) as client:
            looks = await sample_cluster(client, QUEUES, {}, now_ms=NOW_MS)

    by_group = {(look["queue"], look["group"]): look for look in looks}
    assert set(by_group) == {("orders", "g0"), ("orders", "g1"), ("events", "g0"), ("events", "g1"),
                             ("events", "workers")}, sorted(by_group)
    for (name, group), look in by_group.items():
        queue = next(q for q in QUEUES if q.name == name)
        rows = {row[0]: row for row in look["partitions"]}
        assert sorted(rows) == list(range(PARTITIONS)), (name, group, rows)
        for partition, row in rows.items():
            _number, position, end, lag, lag_ms, _in_flight, _p, _c = row
            expected = 0 if group == "workers" else _position(int(group[1]), partition)
            assert (position, end, lag) == (expected, RECORDS, RECORDS - expected), (name, group, row)
            truth = NOW_MS - _stamp(queue.broker_topic, partition, position)
            assert lag_ms == truth, (name, group, partition, lag_ms, truth)
        assert look["lag_ms"] == max(row[4] for row in look["partitions"])
        assert look["dead_letters"] == (DEAD_LETTERS if look["kind"] == "queue" else None)
        if group == "workers":
            assert look["in_flight"] == 3 * PARTITIONS
            assert look["oldest_unacked_ms"] == NOW_MS - min(_stamp(queue.broker_topic, p, 0) for p in range(PARTITIONS))
