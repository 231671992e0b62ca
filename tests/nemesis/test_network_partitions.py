"""Network partitions between hosts of their own (issue 45): one round per nemesis, each under an idempotent
acks=all producer and a consumer group member (tests/nemesis/cluster.py), checked for acknowledged records lost,
duplicates, order per partition and divergent replicas once healed, and for how long a partition went without an
acknowledged write while a majority side with the controller existed.

Jepsen's analyses of Kafka, RabbitMQ, NATS and Redpanda were about these cases: a leader cut off from the
controller and its followers but not from its clients must stop acknowledging acks=all writes (it cannot reach
min.insync.replicas) and none of the writes it acknowledged may vanish when it returns as a follower.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness import hosts
from tests.nemesis.cluster import (
    SESSION_TIMEOUT_MS,
    HostedCluster,
    Workload,
    finish_and_check,
    start_hosted_cluster,
)

pytestmark = [pytest.mark.timeout(300), pytest.mark.skipif(hosts.available() is not None,
                                                            reason=str(hosts.available()))]

FAULT_S = 10
SILENCE_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 3  # the bound, once a majority side exists


@pytest.fixture
def cluster(tmp_path):
    with hosts.Network() as network:
        yield start_hosted_cluster(tmp_path, network)


async def run_round(cluster: HostedCluster, fault, *, bounded: bool = True) -> dict:
    """Workload for 2 s, ``fault`` (a coroutine function: cut, wait, heal), 3 s more, then the checks."""
    load = await Workload.start(cluster)
    await asyncio.sleep(2)
    fault_started = time.monotonic()
    await fault()
    cluster.network.heal()
    healed = time.monotonic()
    await asyncio.sleep(3)
    await cluster.wait_in_sync(timeout_s=60)
    verdict = await finish_and_check(cluster, load, silence_window=(fault_started, healed))
    problems = verdict.problems(SILENCE_BOUND_S if bounded else None)
    figures = {"acknowledged": verdict.acknowledged, "lost": verdict.lost, "duplicated": verdict.duplicated,
               "out_of_order": verdict.out_of_order, "divergent": len(verdict.divergent),
               "longest_silence_s": round(verdict.longest_silence_s, 1),
               "silence_by_partition": verdict.silence_by_partition}
    print(f"round figures: {figures}")
    assert verdict.acknowledged > 1000, figures
    assert not problems, f"{problems}; {figures}"
    return figures


async def test_a_leader_cut_off_from_the_controller_and_its_followers_but_not_its_clients(cluster):
    """It keeps its clients but cannot reach min.insync.replicas: it must stop acknowledging, the controller
    moves leadership to the followers, and what the old leader acknowledged survives its return."""
    victim = await cluster.leader_of(0)

    async def fault() -> None:
        cluster.network.isolate(cluster.host_of(victim), keep=[cluster.network.clients])
        await asyncio.sleep(FAULT_S)
        assert await cluster.leader_of(0) != victim, "leadership of partition 0 did not move"

    await run_round(cluster, fault)


async def test_the_controller_cut_off_from_every_broker(cluster):
    """The data plane holds without the controller: no send fails, nothing stalls."""
    async def fault() -> None:
        for broker_id in cluster.deployment.brokers:
            cluster.network.cut(cluster.controller, cluster.host_of(broker_id))
        await asyncio.sleep(FAULT_S)

    figures = await run_round(cluster, fault)
    assert figures["longest_silence_s"] < 1.5, figures  # (no leader moved: writes never paused)


async def test_a_minority_broker_split_from_the_majority_with_the_controller(cluster):
    """The broker leading partition 0 on one side (its clients still reach it), the controller and the two other
    brokers on the other."""
    victim = await cluster.leader_of(0)
    others = [cluster.host_of(b) for b in cluster.deployment.brokers if b != victim]

    async def fault() -> None:
        cluster.network.split([cluster.host_of(victim)], [cluster.controller, *others])
        await asyncio.sleep(FAULT_S)

    await run_round(cluster, fault)


async def test_a_one_way_partition_from_a_leader_to_the_controller(cluster):
    """The leader of partition 0 hears the controller, but the controller never hears it (its heartbeats are
    lost): the controller fences it and moves its partitions; the leader must stop acknowledging."""
    victim = await cluster.leader_of(0)

    async def fault() -> None:
        cluster.network.cut_one_way(cluster.host_of(victim), cluster.controller)
        await asyncio.sleep(FAULT_S)

    await run_round(cluster, fault)
