"""Clients re-route around a frozen leader (issue 40).

Rule: when a partition's leader stops answering (SIGSTOP: its sockets stay open, nothing answers) and the
controller moves leadership, producers and consumers follow within the broker session timeout plus 3 s instead of
waiting out the freeze. Before, the producer's partitions stalled 10.2 s of a 10 s freeze: requests in flight to the
frozen broker were waited for until it woke.

Real processes: a controller and three brokers, a 3-partition topic on three replicas. An idempotent acks=all
producer writes steadily and a consumer reads every partition; the broker leading partition 0 is SIGSTOPped for
10 s, then continued. Every send is acknowledged, nothing is lost or duplicated, each partition stays in order, no
partition goes without an acknowledged write (or, for the consumer, a delivered record) for longer than the
session timeout plus 3 s.

The same for queue workers (receive and accept through the group's coordinator, which reads the partitions from
their leaders): one freeze of a partition's leader that is not the coordinator, one of the coordinator's broker.
No partition goes without a delivery longer than the bound, every acknowledged write is delivered, and nothing
whose acceptance was confirmed comes back.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from tests.fault.test_cluster_failover import consume_everything
from tests.fault.test_idempotent_failover import (
    PARTITIONS,
    TOPIC,
    SteadyProducer,
    create_replicated_topic,
    longest_silence_s,
)
from tideway.native import Consumer, QueueConsumer, TidewayClient
from tideway.native.group import CoordinatorLink
from tideway.protocol import errors

pytestmark = [pytest.mark.timeout(300), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

SESSION_TIMEOUT_MS = 2000
FREEZE_S = 10


class Reader:
    """A consumer of every partition that notes when each record arrives."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(bootstrap, fetch_max_wait_ms=500)
        self.arrivals: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self._task: asyncio.Task | None = None
        self._reading = True

    async def start(self) -> None:
        await self.consumer.start()
        await self.consumer.assign([(TOPIC, p) for p in range(PARTITIONS)], start="earliest")
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._reading:
            for (_topic, partition), records in (await self.consumer.getmany(timeout_ms=200)).items():
                self.arrivals[partition] += [time.monotonic()] * len(records)

    async def stop(self) -> None:
        self._reading = False
        await self._task
        await self.consumer.stop()



class Workers:
    """Queue workers: receive and accept in a loop; note when each record arrives, what was delivered and what
    was accepted (an accept refused during a failover may still have been stored, or the record comes back)."""

    def __init__(self, bootstrap: str, group: str) -> None:
        self.queue = QueueConsumer(bootstrap, group, TOPIC)
        self.arrivals: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self.delivered: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        self.accepted: dict[int, set[bytes]] = {p: set() for p in range(PARTITIONS)}
        self.came_back: list[bytes] = []
        self._task: asyncio.Task | None = None
        self._working = True

    async def start(self) -> None:
        await self.queue.start()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._working:
            messages = await self.queue.receive(100, wait_ms=200)
            now = time.monotonic()
            for message in messages:
                self.arrivals[message.partition].append(now)
                self.delivered[message.partition].add(message.value)
                if message.value in self.accepted[message.partition]:
                    self.came_back.append(message.value)
            try:
                await self.queue.ack(messages)
            except errors.InvalidRecordStateError:
                continue  # accepted before the failover, or its lock ran out and it comes back
            for message in messages:
                self.accepted[message.partition].add(message.value)

    async def stop(self) -> None:
        self._working = False
        await self._task
        await self.queue.stop()


async def freeze(broker, seconds: float = FREEZE_S) -> tuple[float, float]:
    """SIGSTOP ``broker`` for ``seconds``, then let it run 3 s more; (when it froze, when that ended): the span in
    which the clients' silences are measured."""
    started = time.monotonic()
    broker.signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(seconds)
    finally:
        broker.signal(signal.SIGCONT)
    await asyncio.sleep(3)
    return started, time.monotonic()


async def test_a_frozen_leader_stalls_no_partition_beyond_the_session_timeout(deployment_factory):
    deployment = deployment_factory(brokers=3, session_timeout_ms=SESSION_TIMEOUT_MS)
    await create_replicated_topic(deployment)
    load = SteadyProducer(deployment.bootstrap)
    reader = Reader(deployment.bootstrap)
    await load.start()
    await reader.start()
    await asyncio.sleep(2)
    state = await deployment.describe()
    started, ended = await freeze(deployment.brokers[deployment.partition(state, TOPIC, 0).leader])
    await load.stop()
    await asyncio.sleep(1)
    await reader.stop()

    assert load.failures == [], f"{len(load.failures)} sends failed, e.g. {load.failures[:3]}"
    produced_silence = load.longest_silence_s(started, ended)
    consumed_silence = longest_silence_s(reader.arrivals, started, ended)
    bound = SESSION_TIMEOUT_MS / 1000 + 3
    print(f"longest silences: produced {produced_silence:.2f} s, consumed {consumed_silence:.2f} s")
    assert produced_silence <= bound, f"a partition went {produced_silence:.1f} s without an acknowledged write"
    assert consumed_silence <= bound, f"a partition went {consumed_silence:.1f} s without a delivered record"
    acked = sum(len(v) for v in load.acked.values())
    stored = await consume_everything(deployment.bootstrap, PARTITIONS, acked)
    for partition, values in load.acked.items():
        data = stored[partition]
        assert len(data) == len(set(data)), f"partition {partition} holds duplicates"
        assert data == sorted(data), f"partition {partition} is out of send order"
        assert set(values) <= set(data), f"partition {partition} lost {len(set(values) - set(data))} acknowledged records"


async def test_queue_workers_go_on_while_a_leader_or_the_coordinator_is_frozen(deployment_factory):
    deployment = deployment_factory(brokers=3, session_timeout_ms=SESSION_TIMEOUT_MS)
    await create_replicated_topic(deployment)
    async with TidewayClient(deployment.bootstrap) as client:
        coordinator = await CoordinatorLink(client, "workers", group_type="queue").find()
    load = SteadyProducer(deployment.bootstrap)
    workers = Workers(deployment.bootstrap, "workers")
    await load.start()
    await workers.start()
    await asyncio.sleep(2)
    state = await deployment.describe()
    leader = next(deployment.partition(state, TOPIC, p).leader for p in range(PARTITIONS)
                  if deployment.partition(state, TOPIC, p).leader != coordinator)
    spans = [await freeze(deployment.brokers[leader])]  # a leader the coordinator reads from
    async with TidewayClient(deployment.bootstrap) as client:
        assert await CoordinatorLink(client, "workers", group_type="queue").find() == coordinator
    spans.append(await freeze(deployment.brokers[coordinator]))  # the coordinator itself
    await load.stop()

    acked = {p: set(values) for p, values in load.acked.items()}
    deadline = time.monotonic() + 60
    while any(acked[p] - workers.delivered[p] for p in acked) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    await workers.stop()

    assert load.failures == [], f"{len(load.failures)} sends failed, e.g. {load.failures[:3]}"
    bound = SESSION_TIMEOUT_MS / 1000 + 3
    silences = [longest_silence_s(workers.arrivals, started, ended) for started, ended in spans]
    print(f"longest delivery silences: leader frozen {silences[0]:.2f} s, coordinator frozen {silences[1]:.2f} s")
    assert silences[0] <= bound, f"a partition went {silences[0]:.1f} s without a delivery while a leader was frozen"
    assert silences[1] <= bound, f"a partition went {silences[1]:.1f} s without a delivery while the coordinator was frozen"
    for partition, values in acked.items():
        missing = values - workers.delivered[partition]
        assert not missing, f"partition {partition}: {len(missing)} acknowledged records never delivered"
    assert workers.came_back == [], f"{len(workers.came_back)} accepted records were delivered again"
