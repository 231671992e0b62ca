"""Stream groups on a real broker: membership, incremental sticky assignment, offsets, lag."""

from __future__ import annotations

import asyncio
import time

import pytest

from tideway.native import Producer, TidewayClient
from tideway.native.group import GroupConsumer, describe_group, group_lag
from tideway.protocol import errors

pytestmark = pytest.mark.timeout(120)


async def _produce(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    async with Producer(bootstrap, acks="all") as producer:
        futures = [await producer.send(topic, f"{i}".encode(), partition=i % partitions) for i in range(count)]
        await asyncio.gather(*futures)


async def _poll(member: GroupConsumer, seen: dict, rounds: int = 1) -> None:
    for _ in range(rounds):
        for (_topic, partition), records in (await member.getmany(100)).items():
            for record in records:
                seen.setdefault((partition, record.offset), []).append(member.member_id)


async def test_members_share_partitions_and_adding_one_moves_only_what_it_takes(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("events", partitions=6)
    a = GroupConsumer(broker.bootstrap, "g", ["events"], auto_offset_reset="earliest", session_timeout_ms=6000)
    b = GroupConsumer(broker.bootstrap, "g", ["events"], auto_offset_reset="earliest", session_timeout_ms=6000)
    await a.start()
    await b.start()
    try:
        seen: dict = {}

        async def settle(members, expected_total=6):
            async def both():
                while True:
                    for member in members:
                        await _poll(member, seen)
                    owned = [set(mb.assignment()) for mb in members]
                    if sum(len(o) for o in owned) == expected_total and all(
                        len(o) in (expected_total // len(members), -(-expected_total // len(members))) for o in owned
                    ):
                        return owned
            return await asyncio.wait_for(both(), 20)

        before = await settle([a, b])
        assert before[0].isdisjoint(before[1])
        c = GroupConsumer(broker.bootstrap, "g", ["events"], auto_offset_reset="earliest", session_timeout_ms=6000)
        await c.start()
        after = await settle([a, b, c])
        # Sticky: the old members keep a subset of what they had; only the newcomer's partitions moved.
        assert after[0] <= before[0] and after[1] <= before[1]
        moved = (before[0] - after[0]) | (before[1] - after[1])
        assert moved == after[2] and len(moved) == 2
        description = await describe_group(c.client, "g")
        assert description.group_type == "stream" and len(description.members) == 3
        await c.stop()
        await settle([a, b])
    finally:
        await a.stop()
        await b.stop()


async def test_committed_offsets_hand_over_without_redelivery(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("orders", partitions=4)
    await _produce(broker.bootstrap, "orders", 400, 4)
    first = GroupConsumer(broker.bootstrap, "billing", ["orders"], auto_offset_reset="earliest", enable_auto_commit=False)
    await first.start()
    got: dict = {}
    while sum(len(v) for v in got.values()) < 200:
        for tp, records in (await first.getmany(500, max_records=50)).items():
            got.setdefault(tp, []).extend(r.offset for r in records)
    await first.commit()
    committed = {tp: first.position(tp) for tp in first.assignment()}
    await first.stop()  # a clean hand-over: commit, leave
    second = GroupConsumer(broker.bootstrap, "billing", ["orders"], auto_offset_reset="earliest")
    await second.start()
    again: dict = {}
    while sum(len(v) for v in again.values()) + sum(committed.values()) < 400:
        for tp, records in (await second.getmany(500)).items():
            again.setdefault(tp, []).extend(r.offset for r in records)
    for tp, offsets in again.items():
        assert min(offsets) == committed.get(tp, 0), "a committed record was delivered again"
    # Lag: everything read and committed -> 0; the oldest-message age is None.
    await second.commit()
    async with TidewayClient(broker.bootstrap) as client:
        rows = await group_lag(client, "billing")
    assert {r["partition"]: r["lag"] for r in rows} == {0: 0, 1: 0, 2: 0, 3: 0}
    await second.stop()


async def test_lag_and_oldest_message_age(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("metrics", partitions=1)
    await _produce(broker.bootstrap, "metrics", 10, 1)
    member = GroupConsumer(broker.bootstrap, "lagging", ["metrics"], auto_offset_reset="earliest", enable_auto_commit=False)
    await member.start()
    while member.assignment() == [] or member.position(("metrics", 0)) < 4:
        await member.getmany(200, max_records=4)
    await member.commit(offsets={("metrics", 0): 4})
    await asyncio.sleep(0.3)
    async with TidewayClient(broker.bootstrap) as client:
        (row,) = await group_lag(client, "lagging")
    assert row["position"] == 4 and row["log_end"] == 10 and row["lag"] == 6
    assert row["oldest_age_ms"] >= 300
    await member.stop()


async def test_seek_by_offset_and_time(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("replay", partitions=1)
    await _produce(broker.bootstrap, "replay", 5, 1)
    middle = int(time.time() * 1000)
    await asyncio.sleep(0.05)
    await _produce(broker.bootstrap, "replay", 5, 1)
    member = GroupConsumer(broker.bootstrap, "replayer", ["replay"], auto_offset_reset="latest")
    await member.start()
    while not member.assignment():
        await member.getmany(100)
    await member.seek(("replay", 0), 2)
    records = (await member.getmany(1000, max_records=1))[("replay", 0)]
    assert records[0].offset == 2
    await member.seek(("replay", 0), f"@{middle}")
    records = (await member.getmany(1000, max_records=1))[("replay", 0)]
    assert records[0].offset == 5
    with pytest.raises(errors.NotAssignedError):
        await member.seek(("replay", 7), 0)
    await member.stop()


async def test_commit_by_a_non_owner_is_refused(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("owned", partitions=1)
        member = GroupConsumer(client, "owners", ["owned"])
        await member.start()
        while not member.assignment():
            await member.getmany(100)
        intruder = GroupConsumer(client, "owners", ["owned"])
        await intruder.start()
        with pytest.raises(errors.NotAssignedError):
            await intruder.commit(offsets={("owned", 0): 1})
        await intruder.stop()
        await member.stop()


async def test_one_client_runs_a_thousand_groups_without_losing_its_partitions(broker):
    """A thousand stream groups sharing one client each read 5,000 records, committing after every batch.

    Their heartbeats used to queue behind the thousand fetches on the client's one
    connection: members went 8 s without an answer and dropped their partitions
    (1,330 times in this run). They go on a coordination connection of their own now.
    The thousand members also share this test's event loop, which turns for up to 2-4 s
    while they decode their records: with the old 10 s session a slow machine's heartbeats
    went unanswered for 8 s (884 losses in one CI run). The default session is 45 s (Kafka's).
    """
    groups, records, partitions = 1000, 5000, 4
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("events", partitions=partitions)
    async with Producer(broker.bootstrap, acks=1, linger_ms=5) as producer:
        for i in range(records):
            await producer.send("events", b"%d" % i, partition=i % partitions)
        await producer.flush()
    lost: list[str] = []
    async with TidewayClient(broker.bootstrap) as client:
        members = [GroupConsumer(client, f"g{n}", ["events"], auto_offset_reset="earliest", enable_auto_commit=False,
                                 on_lost=lambda tps, n=n: lost.append(f"g{n}")) for n in range(groups)]
        await asyncio.gather(*(member.start() for member in members))

        async def read_all(member: GroupConsumer) -> int:
            got = 0
            while got < records:
                batch = await member.getmany(1000, max_records=1000)
                got += sum(len(batch_records) for batch_records in batch.values())
                if batch:
                    await member.commit()
            return got

        try:
            assert await asyncio.gather(*(read_all(member) for member in members)) == [records] * groups
            assert lost == []
            for member in members[::100]:
                committed = await member.committed([("events", p) for p in range(partitions)])
                assert set(committed.values()) == {records // partitions}
        finally:
            await asyncio.gather(*(member.stop() for member in members))
