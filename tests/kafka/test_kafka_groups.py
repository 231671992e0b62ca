"""Kafka consumer groups (the classic JoinGroup/SyncGroup protocol, with the clients' own assignors) on the Kafka
listeners of a 3-broker deployment, with a tenant's key, for librdkafka, kafka-python and aiokafka each.

Per client: keyed messages in every codec the client writes; a group of two members, a third joining and then one
leaving (rebalances), offsets committed after every batch; then every member stops, more is produced, a new pair of
members starts and must begin exactly where the group committed. Nothing produced goes unread; each partition's
records are read for the first time in offset order (what a member read and could not commit before a rebalance is
read again, as at-least-once delivery allows, but never ahead of a gap); the group's offsets are where Tideway keeps
its stream groups' (the REST API reads them back).

A commit can fail while the group rebalances (REBALANCE_IN_PROGRESS, ILLEGAL_GENERATION: a commit of the old
generation arriving after the new one began), with Kafka's brokers as here; the members do what applications do,
carry on and let the next commit or the next owner of the partition cover it. They are counted, not hidden.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from kafka.errors import CommitFailedError, IllegalGenerationError, RebalanceInProgressError

from tests.harness.gateway import make_queue
from tests.harness.waiting import wait_until
from tests.kafka.clients import confluent_config, kafka_python_config
from tests.kafka.test_kafka_clients import _produce_confluent

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 6
REBALANCING = {KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID}


class Reads:
    """Every record the members read, as (member, partition, offset), and the group's commits."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.records: list[tuple[str, int, int]] = []

    def add(self, member: str, partition: int, offset: int) -> None:
        with self.lock:
            self.records.append((member, partition, offset))

    def positions(self) -> set[tuple[int, int]]:
        with self.lock:
            return {(p, o) for _m, p, o in self.records}

    def first_offsets(self, members: set[str]) -> dict[int, int]:
        with self.lock:
            first: dict[int, int] = {}
            for member, partition, offset in self.records:
                if member in members and partition not in first:
                    first[partition] = offset
            return first

    def first_reads_in_order(self) -> bool:
        """Every partition's records, each taken at its first read, come in offset order (no record is first read
        before an earlier one: nothing skipped and filled in later, nothing out of order)."""
        seen: set[tuple[int, int]] = set()
        last: dict[int, int] = {}
        with self.lock:
            for _member, partition, offset in self.records:
                if (partition, offset) in seen:
                    continue
                if last.get(partition, -1) >= offset:
                    return False
                seen.add((partition, offset))
                last[partition] = offset
        return True


class Member(threading.Thread):
    """A group member in a thread of its own; what stops it early is kept in ``error`` (the test then fails)."""

    def __init__(self, name: str, reads: Reads) -> None:
        super().__init__(daemon=True)
        self.name_, self.reads, self.stop, self.error = name, reads, threading.Event(), None
        self.failed_commits = 0

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # noqa: BLE001 - reported by the test's waits
            self.error = exc

    def consume(self) -> None:
        raise NotImplementedError


class ConfluentMember(Member):
    def __init__(self, name: str, bootstrap: str, key: str, topic: str, group: str, reads: Reads, assignor: str):
        super().__init__(name, reads)
        self.consumer = Consumer(confluent_config(bootstrap, key, **{
            "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "partition.assignment.strategy": assignor}))
        self.consumer.subscribe([topic])

    def consume(self) -> None:
        while not self.stop.is_set():
            messages = self.consumer.consume(200, 0.2)
            for message in messages:
                assert message.error() is None, message.error()
                self.reads.add(self.name_, message.partition(), message.offset())
            if messages:
                try:
                    self.consumer.commit(asynchronous=False)
                except KafkaException as exc:
                    if exc.args[0].code() not in REBALANCING:
                        raise
                    self.failed_commits += 1
        self.consumer.close()  # LeaveGroup


class KafkaPythonMember(Member):
    def __init__(self, name: str, bootstrap: str, key: str, topic: str, group: str, reads: Reads, assignor: str):
        from kafka import KafkaConsumer

        super().__init__(name, reads)
        self.consumer = KafkaConsumer(topic, **kafka_python_config(
            bootstrap, key, group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
            session_timeout_ms=6000, heartbeat_interval_ms=500))

    def consume(self) -> None:
        while not self.stop.is_set():
            batches = self.consumer.poll(timeout_ms=200, max_records=200)
            for tp, records in batches.items():
                for record in records:
                    self.reads.add(self.name_, tp.partition, record.offset)
            if batches:
                try:
                    self.consumer.commit()
                except (CommitFailedError, IllegalGenerationError, RebalanceInProgressError):
                    self.failed_commits += 1
        self.consumer.close()


class AiokafkaMember(Member):
    """aiokafka in an event loop of its own thread, so the test drives every client the same way."""

    def __init__(self, name: str, bootstrap: str, key: str, topic: str, group: str, reads: Reads, assignor: str):
        super().__init__(name, reads)
        self._args = (bootstrap, key, topic, group)

    def consume(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.errors import CommitFailedError as AioCommitFailedError
        from aiokafka.errors import IllegalGenerationError as AioIllegalGeneration
        from aiokafka.errors import RebalanceInProgressError as AioRebalanceInProgress

        bootstrap, key, topic, group = self._args
        consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                    sasl_mechanism="PLAIN", sasl_plain_username="tideway", sasl_plain_password=key,
                                    group_id=group, auto_offset_reset="earliest", enable_auto_commit=False,
                                    session_timeout_ms=6000, heartbeat_interval_ms=500)
        await consumer.start()
        try:
            while not self.stop.is_set():
                batches = await consumer.getmany(timeout_ms=200, max_records=200)
                for tp, records in batches.items():
                    for record in records:
                        self.reads.add(self.name_, tp.partition, record.offset)
                if batches:
                    try:
                        await consumer.commit()
                    except (AioCommitFailedError, AioIllegalGeneration, AioRebalanceInProgress):
                        self.failed_commits += 1
        finally:
            await consumer.stop()


CLIENTS = {
    "librdkafka": (ConfluentMember, "cooperative-sticky"),
    "kafka-python": (KafkaPythonMember, "range"),
    "aiokafka": (AiokafkaMember, "range"),
}


def _committed(bootstrap: str, key: str, topic: str, group: str) -> dict[int, int]:
    reader = Consumer(confluent_config(bootstrap, key, **{"group.id": group}))
    try:
        answer = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30)
    finally:
        reader.close()
    return {tp.partition: tp.offset for tp in answer}


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_group_rebalances_commits_and_resumes_where_it_committed(plane, tenant_a, client):
    _slug, key = tenant_a
    member_type, assignor = CLIENTS[client]
    name = make_queue(plane, key, partitions=PARTITIONS, mode="stream")
    group = f"readers-{client}"
    bootstrap = plane.deployment.kafka_bootstrap
    for codec in ("gzip", "lz4", "zstd", "snappy", "none"):
        _produce_confluent(bootstrap, key, name, 2_000, codec)
    total = 10_000
    reads = Reads()

    def start(member_name: str):
        member = member_type(member_name, bootstrap, key, name, group, reads, assignor)
        member.start()
        started.append(member)
        return member

    started: list[Member] = []

    def read_at_least(count: int) -> bool:
        failed = [m for m in started if m.error is not None]
        assert not failed, f"{failed[0].name_} stopped: {failed[0].error!r}"
        return len(reads.positions()) >= count

    first, second = start("m1"), start("m2")
    wait_until(lambda: read_at_least(2_000), 90, "2,000 read by two members")
    third = start("m3")  # a member joins: rebalance
    wait_until(lambda: read_at_least(5_000), 90, "5,000 read by three members")
    first.stop.set()  # a member leaves: rebalance
    first.join(30)
    wait_until(lambda: read_at_least(8_000), 90, "8,000 read by two members")
    for member in (second, third):
        member.stop.set()
    for member in (second, third):
        member.join(30)
    assert not any(m.is_alive() for m in (first, second, third))
    assert all(m.error is None for m in started), [m.error for m in started]
    committed = _committed(bootstrap, key, name, group)
    # Every record below the commits was read; the group committed what it read.
    read = reads.positions()
    assert all((p, o) in read for p, end in committed.items() for o in range(max(end, 0)))

    for codec in ("gzip", "none"):
        _produce_confluent(bootstrap, key, name, 1_000, codec)
    total += 2_000
    fourth, fifth = start("m4"), start("m5")
    wait_until(lambda: read_at_least(total), 120, f"all {total} read")
    for member in (fourth, fifth):
        member.stop.set()
    for member in (fourth, fifth):
        member.join(30)

    # Nothing unread: every offset of every partition, up to what the group finally committed (the log's end).
    ends = _committed(bootstrap, key, name, group)
    assert sum(ends.values()) == total
    assert reads.positions() == {(p, o) for p in range(PARTITIONS) for o in range(ends[p])}
    # The restarted group began exactly at its commits, partition by partition.
    resumed = reads.first_offsets({"m4", "m5"})
    # (a partition with nothing committed, -1001 in Kafka's terms, starts at the earliest: auto.offset.reset)
    assert resumed == {p: max(committed[p], 0) for p in resumed}, (resumed, committed)
    assert reads.first_reads_in_order()
    failed_commits = sum(m.failed_commits for m in started)
    print(f"{client}: {len(reads.records)} reads of {total} records, {failed_commits} commits refused in rebalances")
    members_per_partition = defaultdict(set)
    for member, partition, _offset in reads.records:
        members_per_partition[partition].add(member)
    assert any(len(ms) > 1 for ms in members_per_partition.values())  # partitions moved between members

    # The group's offsets are Tideway's: the REST API reads them back, with no lag left.
    with plane.client(key) as api:
        offsets = api.get(f"/api/v1/queues/{name}/groups/{group}/offsets")
    assert offsets.status_code == 200, offsets.text
    assert {row["partition"]: (row["committed"], row["lag"]) for row in offsets.json()["partitions"]} == {
        p: (end, 0) for p, end in ends.items()}


def test_a_kafka_groups_members_are_seen_by_deletes_and_by_tideway_until_they_leave(plane, tenant_a):
    """A group with a member over Kafka's classic protocol: DeleteGroups answers NON_EMPTY_GROUP, OffsetDelete
    GROUP_SUBSCRIBED_TO_TOPIC, and Tideway's own DESCRIBE_GROUP (what the console checks before a reset or a
    delete) names the member and its partitions; once it leaves, OffsetDelete forgets a partition's position and
    DeleteGroups the group (kafka-consumer-groups.sh --delete-offsets and --delete, with kafka-python's and
    librdkafka's admin clients)."""
    from confluent_kafka.admin import AdminClient
    from kafka import TopicPartition as KafkaPythonTopicPartition
    from kafka.admin import KafkaAdminClient

    from tideway.native import TidewayClient
    from tideway.native.group import describe_group

    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=2, mode="stream")
    group = plane.unique("deletable")
    bootstrap = plane.deployment.kafka_bootstrap
    _produce_confluent(bootstrap, key, name, 10, "none")
    member = Consumer(confluent_config(bootstrap, key, **{"group.id": group, "auto.offset.reset": "earliest"}))
    member.subscribe([name])
    read = 0

    def read_all() -> bool:
        nonlocal read
        message = member.poll(1)
        read += message is not None and message.error() is None
        return read >= 10

    admin = AdminClient(confluent_config(bootstrap, key))
    tools = KafkaAdminClient(**kafka_python_config(bootstrap, key))
    try:
        wait_until(read_all, 60, "the member to read the 10 messages", interval_s=0)
        member.commit(asynchronous=False)

        async def described():
            async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
                return await describe_group(client, group, "stream")
        answer = asyncio.run(described())
        assert len(answer.members) == 1 and answer.members[0].topics == [name]
        assert sorted(ref.partition for ref in answer.members[0].assigned) == [0, 1]

        [busy] = admin.delete_consumer_groups([group], request_timeout=30).values()
        with pytest.raises(KafkaException) as raised:
            busy.result(timeout=60)
        assert raised.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
        refused = tools.delete_group_offsets(group, [KafkaPythonTopicPartition(name, 0)])
        assert [error.errno for error in refused.values()] == [KafkaError.GROUP_SUBSCRIBED_TO_TOPIC]
    finally:
        member.close()  # leaves the group

    wait_until(lambda: not asyncio.run(described()).members, 30, "the member to be gone")
    forgotten = tools.delete_group_offsets(group, [KafkaPythonTopicPartition(name, 0)])
    assert [error.errno for error in forgotten.values()] == [0]
    assert sorted(o.partition for o in asyncio.run(described()).offsets) == [1]
    [deleted] = admin.delete_consumer_groups([group], request_timeout=30).values()
    deleted.result(timeout=60)
    assert asyncio.run(described()).offsets == []
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}
    tools.close()
