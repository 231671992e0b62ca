"""An idempotent acks=all producer keeps writing through leader failovers (issue 15).

Real processes: a controller and three brokers, a topic with three partitions
on three replicas. Five rounds: SIGKILL the broker leading a partition while
the producer writes, restart it a few seconds later. Every send must be
acknowledged (none fails back to the application), with nothing lost,
nothing twice, each partition in order, and no partition without an
acknowledged write for longer than the session timeout plus 3 seconds.
"""

import asyncio
import time

import pytest

from tests.fault.test_cluster_failover import consume_everything
from tideway.native import Producer, TidewayClient

# One database: the subject is the data plane; the controller's store on both databases is
# tests/fault/test_cluster_failover.py's.
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


TOPIC = "orders"
PARTITIONS = 3
SESSION_TIMEOUT_MS = 2000
ROUNDS = 5


class SteadyProducer:
    """Sends about ``rate`` records a second, one by one, as an application does; records every outcome."""

    def __init__(self, bootstrap: str, rate: int = 300) -> None:
        self.producer = Producer(bootstrap, acks="all", linger_ms=5)
        assert self.producer.idempotent
        self.rate = rate
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.ack_times: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.failures: list[BaseException] = []
        self._outstanding: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.producer.start()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        sequence = 0
        while not self._stop.is_set():
            for _ in range(self.rate // 100):
                partition = sequence % PARTITIONS
                value = b"p%d-%09d" % (partition, sequence)
                sequence += 1
                future = await self.producer.send(TOPIC, value, partition=partition)
                task = asyncio.ensure_future(self._record(partition, value, future))
                self._outstanding.add(task)
                task.add_done_callback(self._outstanding.discard)
            await asyncio.sleep(0.01)

    async def _record(self, partition: int, value: bytes, future) -> None:
        try:
            await future
        except Exception as exc:  # noqa: BLE001 - every failure is what the test counts
            self.failures.append(exc)
            return
        self.acked[partition].append(value)
        self.ack_times[partition].append(time.monotonic())

    async def stop(self) -> None:
        self._stop.set()
        await self._task
        await self.producer.flush()
        if self._outstanding:
            await asyncio.wait(self._outstanding)
        await self.producer.stop()

    def longest_silence_s(self, started: float, ended: float) -> float:
        return longest_silence_s(self.ack_times, started, ended)


def longest_silence_s(times_by_partition: dict[int, list[float]], started: float, ended: float) -> float:
    """The longest time any partition went without an event (an acknowledgement, a delivery) in [started, ended]."""
    worst = 0.0
    for times in times_by_partition.values():
        points = [started, *sorted(t for t in times if started <= t <= ended), ended]
        worst = max(worst, *(b - a for a, b in zip(points, points[1:], strict=False)))
    return worst


async def create_replicated_topic(deployment) -> None:
    """TOPIC on three replicas (min.insync.replicas 2), every replica in sync."""
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3, configs={"min.insync.replicas": "2"})
    await deployment.wait_until(
        lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS, what="topic created")


async def kill_leaders(deployment, rounds: int) -> None:
    """``rounds`` times: SIGKILL the broker leading one of TOPIC's partitions (each in turn), restart it 4 s later,
    and wait until every replica is back in sync."""
    for round_ in range(rounds):
        state = await deployment.describe()
        victim = deployment.brokers[deployment.partition(state, TOPIC, round_ % PARTITIONS).leader]
        victim.kill()
        await asyncio.sleep(4)
        victim.restart()
        await deployment.wait_until(
            lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS,
            timeout_s=30, what=f"round {round_ + 1}: every replica back in sync")
        await asyncio.sleep(1)


async def test_idempotent_producer_writes_through_five_leader_kills(deployment_factory):
    deployment = deployment_factory(brokers=3, session_timeout_ms=SESSION_TIMEOUT_MS)
    await create_replicated_topic(deployment)
    load = SteadyProducer(deployment.bootstrap)
    await load.start()
    started = time.monotonic()
    await asyncio.sleep(1)
    await kill_leaders(deployment, ROUNDS)
    ended = time.monotonic()
    await load.stop()

    assert load.failures == [], f"{len(load.failures)} sends failed, e.g. {load.failures[:3]}"
    assert sum(len(v) for v in load.acked.values()) > ROUNDS * 5 * 100
    stored = await consume_everything(deployment.bootstrap, PARTITIONS, sum(len(v) for v in load.acked.values()))
    for partition, values in load.acked.items():
        data = stored[partition]
        assert len(data) == len(set(data)), f"partition {partition} holds duplicates"
        assert data == sorted(data), f"partition {partition} is out of send order"
        assert set(values) <= set(data), f"partition {partition} lost {len(set(values) - set(data))} acknowledged records"
    silence = load.longest_silence_s(started, ended)
    assert silence <= SESSION_TIMEOUT_MS / 1000 + 3, f"a partition went {silence:.1f}s without an acknowledged write"
