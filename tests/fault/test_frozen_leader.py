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
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest

from brokers.client import Consumer
from tests.fault.test_cluster_failover import consume_everything
from tests.fault.test_idempotent_failover import (
    PARTITIONS,
    TOPIC,
    SteadyProducer,
    create_replicated_topic,
    longest_silence_s,
)

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
