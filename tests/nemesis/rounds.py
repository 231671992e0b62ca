"""The nemeses (Jepsen's word for what breaks a cluster on purpose), one round each: what it does to a hosted
cluster (tests/nemesis/cluster.py) while the workload runs, and what the round then requires.

Used by tests/nemesis/test_nemeses.py (one round per nemesis, in the suite) and bench/nemesis.py (many rounds).
"""

from __future__ import annotations

import asyncio
import datetime
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tests.nemesis.cluster import (
    SESSION_TIMEOUT_MS,
    HostedCluster,
    Workload,
    clock_file,
    finish_and_check,
    links_file,
)

FAULT_S = 10
SILENCE_BOUND_S = SESSION_TIMEOUT_MS / 1000 + 3  # the bound, once a majority side with the controller exists


@dataclass(frozen=True)
class Nemesis:
    name: str
    what: str
    fault: Callable[[HostedCluster], Awaitable[None]]  # does it, waits FAULT_S, undoes what is not the network
    silence_bound_s: float | None = SILENCE_BOUND_S  # None: no bound (no majority side with the controller)
    slow_links: bool = False  # the cluster's brokers talk through link proxies (start_hosted_cluster)


async def _isolate_leader(cluster: HostedCluster) -> None:
    victim = await cluster.leader_of(0)
    cluster.network.isolate(cluster.host_of(victim), keep=[cluster.network.clients])
    await asyncio.sleep(FAULT_S)
    assert await cluster.leader_of(0) != victim, "leadership of partition 0 did not move"


async def _controller_cut_off(cluster: HostedCluster) -> None:
    for broker_id in cluster.deployment.brokers:
        cluster.network.cut(cluster.controller, cluster.host_of(broker_id))
    await asyncio.sleep(FAULT_S)


async def _minority_split(cluster: HostedCluster) -> None:
    victim = await cluster.leader_of(0)
    others = [cluster.host_of(b) for b in cluster.deployment.brokers if b != victim]
    cluster.network.split([cluster.host_of(victim)], [cluster.controller, *others])
    await asyncio.sleep(FAULT_S)


async def _one_way_to_controller(cluster: HostedCluster) -> None:
    victim = await cluster.leader_of(0)
    cluster.network.cut_one_way(cluster.host_of(victim), cluster.controller)
    await asyncio.sleep(FAULT_S)


async def _stop_leader(cluster: HostedCluster) -> None:
    victim = cluster.deployment.brokers[await cluster.leader_of(0)]
    victim.signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(FAULT_S)
    finally:
        victim.signal(signal.SIGCONT)


async def _stop_controller(cluster: HostedCluster) -> None:
    controller = cluster.deployment.controllers[0]
    controller.process.send_signal(signal.SIGSTOP)
    try:
        await asyncio.sleep(FAULT_S)
    finally:
        controller.process.send_signal(signal.SIGCONT)


async def _clock_jump(cluster: HostedCluster) -> None:
    victim = await cluster.leader_of(0)
    clock_file(cluster.home, victim).write_text("+1h\n")
    cluster.notes["clock_jumped"] = (victim, time.time())
    await asyncio.sleep(FAULT_S)


async def _slow_links(cluster: HostedCluster) -> None:
    links_file(cluster.home).write_text("200 100 0.05\n")
    try:
        await asyncio.sleep(FAULT_S)
    finally:
        links_file(cluster.home).write_text("0 0 0\n")


NEMESES = {n.name: n for n in [
    Nemesis("isolated-leader", "the leader of partition 0 cut off from the controller and the other brokers, "
                               "not from its clients", _isolate_leader),
    Nemesis("controller-cut-off", "the controller cut off from every broker", _controller_cut_off),
    Nemesis("minority-split", "the leader of partition 0 alone on one side (its clients reach both), the controller "
                              "and the other brokers on the other", _minority_split),
    Nemesis("one-way", "the packets of partition 0's leader to the controller lost (it hears the controller)",
            _one_way_to_controller),
    Nemesis("paused-leader", "the leader of partition 0 paused (SIGSTOP) for 10 s", _stop_leader),
    Nemesis("paused-controller", "the controller paused (SIGSTOP) for 10 s", _stop_controller),
    Nemesis("clock-jump", "the wall clock of partition 0's leader jumped an hour forward", _clock_jump),
    Nemesis("slow-links", "200 ms ± 100 ms each way and 5% loss between brokers and between the controller and "
                         "the brokers", _slow_links, slow_links=True),
]}


async def run_round(cluster: HostedCluster, nemesis: Nemesis) -> tuple[dict, list[str]]:
    """Workload for 2 s, the nemesis, healing, 3 s more, then the checks: (figures, problems found)."""
    load = await Workload.start(cluster)
    await asyncio.sleep(2)
    fault_started = time.monotonic()
    try:
        await nemesis.fault(cluster)
    finally:
        cluster.network.heal()
    healed = time.monotonic()
    await asyncio.sleep(3)
    await cluster.wait_in_sync(timeout_s=60)
    verdict = await finish_and_check(cluster, load, silence_window=(fault_started, healed))
    problems = verdict.problems(nemesis.silence_bound_s)
    if "clock_jumped" in cluster.notes:  # (its log's timestamps say whether its clock really moved)
        victim, at = cluster.notes["clock_jumped"]
        if not _logged_after(cluster.deployment.brokers[victim].log_text(), at + 50 * 60):
            problems.append(f"broker {victim}'s clock did not jump (no log line stamped an hour ahead)")
    if verdict.acknowledged < 1000:
        problems.append(f"only {verdict.acknowledged} records acknowledged: the workload hardly ran")
    figures = {"nemesis": nemesis.name, "acknowledged": verdict.acknowledged, "failed_sends": verdict.failed_sends,
               "lost": verdict.lost, "duplicated": verdict.duplicated, "out_of_order": verdict.out_of_order,
               "divergent_replicas": len(verdict.divergent), "group_missing": verdict.group_missing,
               "longest_silence_s": round(verdict.longest_silence_s, 1),
               "silence_by_partition": verdict.silence_by_partition}
    return figures, problems


def _logged_after(log_text: str, wall_s: float) -> bool:
    """Whether a line of a process's log is stamped at or after ``wall_s`` (its own wall clock)."""
    for line in log_text.splitlines():
        try:
            stamp = datetime.datetime.strptime(line[:19], "%Y-%m-%d %H:%M:%S").timestamp()
        except ValueError:
            continue
        if stamp >= wall_s:
            return True
    return False
