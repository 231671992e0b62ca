"""Lag in seconds for every partition, with many lagging partitions on every broker and two tenants (issue 40).

Rule: a look gives every lagging partition the age of its first unconsumed record, however many partitions lag
on one broker and whoever owns them. The look once asked each leader with one FETCH whose request-wide byte
limit was 1, so only the first partition of each request got a time and every other one read 0.

Real processes: a controller and three brokers; two tenants with a 6-partition queue each (so every broker
leads about two partitions of each), records written with times the test chooses, two stream groups per
tenant committed at positions the test chooses, and a queue group with records held in flight. Every
partition's figure is compared with the time of the record at the group's position.

Then two more looks, 10 s apart on the look's clock, while the test writes and commits known amounts: every
partition's produce and consume rates, time-to-drain and live status (issue 40, point 2) against what the
test did: draining groups with exact estimates, a group falling behind, stopped groups, a stalled queue group.
"""

from __future__ import annotations

import pytest
from tideway_server.lag.sampler import QueueRef, sample_cluster

from tests.harness.processes import OPERATOR_KEY
from tideway.native import Producer, TidewayClient
from tideway.native.group import CoordinatorLink, commit_offsets
from tideway.native.queue import QueueConsumer

LOOK_S = 10  # between the looks of the second part, on the look's clock

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
            _check_first_look(looks)
            later = await _two_more_looks(client, looks)
    _check_rates_and_drain(later)


def _check_first_look(looks: list[dict]) -> None:
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


# The second part. Per look: tenant 1's g0 commits 10 more on every partition of t1.orders (nothing written);
# tenant 2 writes 4 more to every partition of t2.events, its g0 commits 8 more there; tenant 2's g1 commits
# nothing; tenant 1's g1 moves by p % 3 on partition p (so rates differ per partition); no one else
# moves. Rates are per second over the window of three looks.
T1_G0_STEP, T2_WRITES, T2_G0_STEP = 10, 4, 8


async def _two_more_looks(client: TidewayClient, first: list[dict]) -> list[dict]:
    previous = {(look["tenant_id"], f"{look['kind']}:{look['queue']}:{look['group']}"): look for look in first}
    links = {(t, g): CoordinatorLink(client, f"t{t}.stream.g{g}") for t in (1, 2) for g in (0, 1)}
    looks: list[dict] = []
    async with Producer(client, acks="all", linger_ms=0) as producer:
        for step in (1, 2):
            for partition in range(PARTITIONS):
                for offset in range(RECORDS + (step - 1) * T2_WRITES, RECORDS + step * T2_WRITES):
                    await producer.send("t2.events", b"r%d" % offset, partition=partition,
                                        timestamp_ms=_stamp("t2.events", partition, offset))
            await producer.flush()
            await commit_offsets(links[1, 0], {("t1.orders", p): _position(0, p) + step * T1_G0_STEP
                                               for p in range(PARTITIONS) if _position(0, p) + 2 * T1_G0_STEP < RECORDS})
            await commit_offsets(links[2, 0], {("t2.events", p): _position(0, p) + step * T2_G0_STEP
                                               for p in range(PARTITIONS)})
            await commit_offsets(links[1, 1], {("t1.orders", p): _position(1, p) + step * (p % 3) for p in range(PARTITIONS)})
            looks = await sample_cluster(client, QUEUES, previous, now_ms=NOW_MS + step * LOOK_S * 1000)
            previous = {(look["tenant_id"], f"{look['kind']}:{look['queue']}:{look['group']}"): look for look in looks}
    return looks


def _check_rates_and_drain(looks: list[dict]) -> None:
    window_s = 2 * LOOK_S
    by_group = {(look["queue"], look["group"]): look for look in looks}
    for (name, group), look in by_group.items():
        status = look["status"]
        assert (status["window_start_ms"], status["window_end_ms"]) == (NOW_MS, NOW_MS + window_s * 1000)
        queue = next(q for q in QUEUES if q.name == name)
        written = 2 * T2_WRITES if name == "events" else 0
        expected_rows = {}
        for partition in range(PARTITIONS):
            if group == "workers":
                moved = 0
            elif (name, group) == ("orders", "g0"):
                moved = 2 * T1_G0_STEP if _position(0, partition) + 2 * T1_G0_STEP < RECORDS else 0
            elif (name, group) == ("events", "g0"):
                moved = 2 * T2_G0_STEP
            elif (name, group) == ("orders", "g1"):
                moved = 2 * (partition % 3)
            else:
                moved = 0
            start = 0 if group == "workers" else _position(int(group[1]), partition)
            lag = RECORDS + written - start - moved
            produce, consume = written / window_s, moved / window_s
            if consume > produce:
                state, drain, falling = "OK" if moved else "STOPPED", round(lag / (consume - produce), 1), False
            else:
                state, drain, falling = ("STALLED" if group == "workers" else "STOPPED"), None, True
            expected_rows[partition] = {"partition": partition, "status": state, "lag": lag,
                                        "lag_ms": NOW_MS + window_s * 1000 - _stamp(queue.broker_topic, partition,
                                                                                       start + moved),
                                        "produce_rate": round(produce, 3), "consume_rate": round(consume, 3),
                                        "drain_s": drain, "falling_behind": falling}
        assert {row["partition"]: row for row in status["partitions"]} == expected_rows, (name, group)
        drains = [row["drain_s"] for row in expected_rows.values()]
        falling = any(row["falling_behind"] for row in expected_rows.values())
        assert status["falling_behind"] == falling, (name, group)
        assert status["drain_s"] == (None if falling else max(drains)), (name, group)
        assert status["lag"] == look["lag"] == sum(row["lag"] for row in expected_rows.values())
        # The look's own rates: since the previous look, summed over the partitions.
        assert look["produce_rate"] == round(PARTITIONS * written / window_s, 3), (name, group)
        assert look["consume_rate"] == round(sum(r["consume_rate"] for r in expected_rows.values()), 3), (name, group)
    # The statuses a user would read, per group: draining groups OK with an estimate, the others not.
    states = {key: (look["status"]["status"], look["status"]["drain_s"] is not None) for key, look in by_group.items()}
    assert states[("events", "g0")] == ("OK", True)
    assert states[("events", "g1")] == ("STOPPED", False)  # nothing consumed while 8 a partition arrived
    assert states[("events", "workers")] == ("STALLED", False)  # records in flight, the position never moved
    assert states[("orders", "g0")] == ("STOPPED", False)  # partitions 4 and 5 at rest behind the end
    assert states[("orders", "g1")] == ("STOPPED", False)  # partitions 0 and 3 never moved: the group's worst
