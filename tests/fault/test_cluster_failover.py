"""A replicated cluster under broker and controller failures (issue 3).

Real processes: controller(s) with a SQLite control-plane database, three
brokers, SIGKILL/SIGSTOP. Rounds are bounded; long soaks live in bench/.
"""

import asyncio
import signal
import time

import pytest

from tideway.native import Consumer, Producer, TidewayClient
from tideway.protocol import errors

TOPIC = "orders"
PARTITIONS = 6


async def create_topic(deployment, partitions=PARTITIONS, configs=None) -> None:
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=partitions, replication_factor=3, configs=configs or {"min.insync.replicas": "2"})
    await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == partitions, what="topic created"
    )


async def consume_everything(bootstrap: str, partitions: int, expected: int, timeout_s: float = 60) -> dict[int, list[bytes]]:
    consumer = Consumer(bootstrap)
    await consumer.start()
    await consumer.assign([(TOPIC, p) for p in range(partitions)], start="earliest")
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    total = 0
    deadline = time.monotonic() + timeout_s
    quiet_rounds = 0
    while time.monotonic() < deadline and (total < expected or quiet_rounds < 2):
        batch = await consumer.getmany(timeout_ms=500)
        quiet_rounds = 0 if batch else quiet_rounds + 1
        for (_topic, partition), records in batch.items():
            out[partition] += [r.value for r in records]
            total += len(records)
    await consumer.stop()
    return out


class Load:
    """A producer writing acks=all continuously; remembers what was acknowledged."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(bootstrap, acks="all", linger_ms=2, retries=10, request_timeout_ms=10_000)
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.failed = 0
        self.sequence = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._stop.is_set():
            pending = []
            for _ in range(50):
                value = b"m-%09d" % self.sequence
                self.sequence += 1
                pending.append((value, await self.producer.send(TOPIC, value, key=value[-3:])))
            for value, future in pending:
                try:
                    metadata = await future
                    self.acked[metadata.partition].append(value)
                except errors.TidewayError:
                    self.failed += 1
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        self._stop.set()
        await asyncio.wait_for(self._task, 60)
        await self.producer.stop()

    @property
    def total_acked(self) -> int:
        return sum(len(v) for v in self.acked.values())


async def first_produce_after(bootstrap: str, partition: int, started: float) -> float:
    """Seconds from ``started`` until an acks=all write to ``partition`` succeeds."""
    async with Producer(bootstrap, acks="all", linger_ms=0, retries=0, request_timeout_ms=2000) as probe:
        while True:
            try:
                await probe.send_and_wait(TOPIC, b"probe", partition=partition)
                return time.monotonic() - started
            except errors.TidewayError:
                await asyncio.sleep(0.05)


def check_no_loss_no_duplicates_in_order(acked: dict[int, list[bytes]], stored: dict[int, list[bytes]]) -> None:
    for partition, values in acked.items():
        data = [v for v in stored[partition] if v != b"probe"]
        assert len(data) == len(set(data)), f"partition {partition} holds duplicates"
        position = {v: i for i, v in enumerate(data)}
        missing = [v for v in values if v not in position]
        assert not missing, f"partition {partition} lost {len(missing)} acknowledged messages, e.g. {missing[:3]}"
        order = [position[v] for v in values]
        assert order == sorted(order), f"partition {partition} reordered acknowledged messages"


async def test_leaders_killed_in_rounds_lose_nothing_acknowledged(deployment_factory):
    deployment = deployment_factory()
    await create_topic(deployment)
    load = Load(deployment.bootstrap)
    await load.start()
    failover_seconds = []
    for _round in range(3):
        await asyncio.sleep(1.0)
        state = await deployment.describe()
        leader = deployment.partition(state, TOPIC, 0).leader
        killed_at = time.monotonic()
        deployment.brokers[leader].kill()
        failover_seconds.append(await first_produce_after(deployment.bootstrap, 0, killed_at))
        deployment.brokers[leader].restart()
        await deployment.wait_until(
            lambda s: all(len(p.isr) == 3 for p in s.partitions if p.topic == TOPIC), what="ISR back to 3"
        )
    await load.stop()
    print(f"failover times (kill -> first acks=all produce on the new leader): {[round(s, 2) for s in failover_seconds]} s")
    assert load.total_acked > 500
    assert max(failover_seconds) < 5.0, failover_seconds
    stored = await consume_everything(deployment.bootstrap, PARTITIONS, load.total_acked)
    check_no_loss_no_duplicates_in_order(load.acked, stored)


async def test_a_stopped_follower_leaves_the_isr_and_rejoins_after_sigcont(deployment_factory):
    deployment = deployment_factory()
    await create_topic(deployment, partitions=1)
    state = await deployment.describe()
    partition = deployment.partition(state, TOPIC, 0)
    follower = next(r for r in partition.replicas if r != partition.leader)
    deployment.brokers[follower].signal(signal.SIGSTOP)
    try:
        await deployment.wait_until(lambda s: follower not in deployment.partition(s, TOPIC, 0).isr, what="follower out of ISR")
        async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
            for i in range(100):
                await producer.send_and_wait(TOPIC, b"while stopped %d" % i)  # writes go on with two in sync
    finally:
        deployment.brokers[follower].signal(signal.SIGCONT)
    await deployment.wait_until(lambda s: follower in deployment.partition(s, TOPIC, 0).isr, what="follower back in ISR")
    async with TidewayClient(deployment.brokers[follower].bootstrap) as client:
        (topic,) = await client.describe_topics([TOPIC])
        assert topic.partitions[0].log_end_offset == 100  # it caught up before rejoining


async def test_two_of_three_down_refuses_acks_all_then_resumes(deployment_factory):
    deployment = deployment_factory()
    await create_topic(deployment, partitions=1)
    async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
        for i in range(50):
            await producer.send_and_wait(TOPIC, b"before %d" % i)
    state = await deployment.describe()
    leader = deployment.partition(state, TOPIC, 0).leader
    others = [b for b in deployment.brokers if b != leader]
    for broker_id in others:
        deployment.brokers[broker_id].kill()
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).isr == [leader], what="ISR down to the leader")
    async with Producer(deployment.brokers[leader].bootstrap, acks="all", linger_ms=0, retries=0) as producer:
        # Refused up front once the leader knows its ISR shrank; if the controller's word reaches it just
        # after the append, the record is written but not acknowledged (NOT_ENOUGH_REPLICAS_AFTER_APPEND):
        # never acknowledged by the leader alone.
        with pytest.raises((errors.NotEnoughReplicasError, errors.NotEnoughReplicasAfterAppendError)) as refusal:
            await producer.send_and_wait(TOPIC, b"refused")
    written = [b"refused"] if isinstance(refusal.value, errors.NotEnoughReplicasAfterAppendError) else []
    deployment.brokers[others[0]].restart()
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, what="a second replica back in sync")
    async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
        await producer.send_and_wait(TOPIC, b"resumed")
    stored = await consume_everything(deployment.bootstrap, 1, 51 + len(written))
    assert stored[0] == [b"before %d" % i for i in range(50)] + written + [b"resumed"]


async def test_a_standby_controller_takes_over_and_handles_the_next_failure(deployment_factory):
    deployment = deployment_factory(controllers=2)
    await create_topic(deployment, partitions=2)
    before = await deployment.describe()
    active = next(c for c in deployment.controllers if before.controller_id.split(":")[1] == str(c.process.pid))
    active.kill()
    after = await deployment.wait_until(
        lambda s: s.controller_epoch > before.controller_epoch and sum(b.state == "alive" for b in s.brokers) == 3,
        what="standby active with every broker registered",
    )
    assert after.controller_id != before.controller_id
    leader = deployment.partition(after, TOPIC, 0).leader
    killed_at = time.monotonic()
    deployment.brokers[leader].kill()
    moved = await deployment.wait_until(
        lambda s: deployment.partition(s, TOPIC, 0).leader not in (leader, -1), what="leadership moved by the new controller"
    )
    assert deployment.partition(moved, TOPIC, 0).leader_epoch > deployment.partition(after, TOPIC, 0).leader_epoch
    assert await first_produce_after(deployment.bootstrap, 0, killed_at) < 10


async def test_partitions_are_added_through_the_controller(deployment_factory):
    deployment = deployment_factory()
    await create_topic(deployment, partitions=2)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_partitions(TOPIC, 5)
        with pytest.raises(errors.InvalidPartitionsError):
            await client.create_partitions(TOPIC, 3)  # partitions never shrink
    state = await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == 5, what="five in-sync partitions"
    )
    assert {p.leader for p in state.partitions if p.topic == TOPIC} == {1, 2, 3}  # leaders spread over the brokers
    async with Producer(deployment.bootstrap, acks="all", linger_ms=0) as producer:
        for p in range(5):
            assert (await producer.send_and_wait(TOPIC, b"to %d" % p, partition=p)).offset == 0
