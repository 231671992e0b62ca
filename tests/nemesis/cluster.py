"""A cluster on hosts of their own, the workload every nemesis round runs under, and the checker (issue 45).

The cluster: a controller and three brokers, each in a network namespace (tests/harness/hosts.py); the test
process is the clients' side. The workload: an idempotent acks=all producer writing steadily to a topic of three
partitions on three replicas (min.insync.replicas 2), and a consumer group member reading it. The checker, after
the round healed: 0 acknowledged records lost, 0 duplicates in the log, each partition in the order sent, every
replica identical (read from each broker's files once the cluster is quiet), and the longest time a partition went
without an acknowledged write while a majority side existed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.fault.test_cluster_failover import consume_everything
from tests.fault.test_idempotent_failover import (
    PARTITIONS,
    TOPIC,
    SteadyProducer,
    longest_silence_s,
)
from tests.harness.hosts import Network
from tests.harness.processes import BrokerProcess, ControllerProcess, Deployment
from tideway.native import GroupConsumer, TidewayClient

SESSION_TIMEOUT_MS = 2000
GROUP = "nemesis-readers"


@dataclass
class HostedCluster:
    network: Network
    deployment: Deployment
    home: Path
    notes: dict = field(default_factory=dict)  # what a nemesis did, for the checks after it

    @property
    def controller(self):
        return self.network.hosts["controller"]

    def host_of(self, broker_id: int):
        return self.network.hosts[f"b{broker_id}"]

    async def leader_of(self, partition: int) -> int:
        state = await self.deployment.describe()
        return self.deployment.partition(state, TOPIC, partition).leader

    async def wait_in_sync(self, timeout_s: float = 60) -> None:
        await self.deployment.wait_until(
            lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS,
            timeout_s=timeout_s, what="every replica in sync")


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def clock_file(home: Path, broker_id: int) -> Path:
    """The file holding broker ``broker_id``'s wall-clock offset (libfaketime's "+0", "+1h"...)."""
    return home / f"clock-{broker_id}"


def links_file(home: Path) -> Path:
    """The link proxies' figures between brokers (tests/harness/link_proxy.py): "delay_ms jitter_ms loss"."""
    return home / "links"


def start_hosted_cluster(home: Path, network: Network, *, brokers: int = 3, slow_links: bool = False) -> HostedCluster:
    """Controller and brokers on hosts of their own; returns once every broker is alive and TOPIC is created,
    every replica in sync. ``slow_links``: the brokers' connections to each other's internal listeners and to the
    controller, and the controller's to the brokers, go through link proxies, which links_file() slows."""
    controller_host = network.add_host("controller")
    timing = ["--lease-ms", "2000", "--broker-session-timeout-ms", str(SESSION_TIMEOUT_MS)]
    controller = ControllerProcess(home, "controller", extra_args=timing, host=controller_host).start()
    if slow_links:  # the controller's connections to the brokers' internal listeners too
        controller_host.slow_outgoing([BrokerProcess.HOSTED_INTERNAL_PORT], links_file(home))
    broker_processes = {}
    for i in range(1, brokers + 1):
        host = network.add_host(f"b{i}")
        if slow_links:
            host.slow_outgoing([BrokerProcess.HOSTED_INTERNAL_PORT, controller.port], links_file(home))
        # Each broker's wall clock can be moved (libfaketime reads its offset from a file, a second at most
        # later); the monotonic clock, which timeouts use, stays the machine's, as on a host whose clock jumps.
        clock_file(home, i).write_text("+0\n")
        clock = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME_TIMESTAMP_FILE": str(clock_file(home, i)),
                 "FAKETIME_CACHE_DURATION": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"} if Path(LIBFAKETIME).exists() else None
        broker_processes[i] = BrokerProcess(
            home / f"broker-{i}", broker_id=i, host=host, env=clock,
            extra_args=["--controller", controller.address, "--replica-lag-time-max-ms", "2000"],
        ).start()
    deployment = Deployment([controller], broker_processes)
    cluster = HostedCluster(network, deployment, home)
    # In a thread: the tests calling this run in an event loop already.
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, deployment.wait_until(
            lambda s: sum(b.state == "alive" for b in s.brokers) == brokers, 60, f"{brokers} live brokers")).result()
        pool.submit(asyncio.run, create_topic(cluster)).result()
    return cluster


async def create_topic(cluster: HostedCluster) -> None:
    async with TidewayClient(cluster.deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3,
                                  configs={"min.insync.replicas": "2"})
    await cluster.wait_in_sync()


class GroupReader:
    """A consumer group member reading TOPIC, committing as it goes; notes what it got and when."""

    def __init__(self, bootstrap: str) -> None:
        self.member = GroupConsumer(bootstrap, GROUP, [TOPIC], auto_offset_reset="earliest",
                                    auto_commit_interval_ms=500, session_timeout_ms=10_000)
        self.values: set[bytes] = set()
        self.arrivals: dict[int, list[float]] = {p: [] for p in range(PARTITIONS)}
        self._reading = True
        self._task: asyncio.Task | None = None

    async def start(self) -> None:
        await self.member.start()
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while self._reading:
            for (_topic, partition), records in (await self.member.getmany(timeout_ms=200)).items():
                self.values.update(r.value for r in records)
                self.arrivals[partition] += [time.monotonic()] * len(records)

    async def drain(self, expected: set[bytes], timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while not expected <= self.values and time.monotonic() < deadline:
            await asyncio.sleep(0.2)

    async def stop(self) -> None:
        self._reading = False
        if self._task is not None:
            await self._task
        await self.member.stop()


@dataclass
class Workload:
    producer: SteadyProducer
    reader: GroupReader
    started: float = 0.0

    @classmethod
    async def start(cls, cluster: HostedCluster) -> Workload:
        producer = SteadyProducer(cluster.deployment.bootstrap)
        reader = GroupReader(cluster.deployment.bootstrap)
        await producer.start()
        await reader.start()
        return cls(producer, reader, time.monotonic())


@dataclass
class Verdict:
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    out_of_order: list[int] = field(default_factory=list)
    divergent: list[str] = field(default_factory=list)
    failed_sends: int = 0
    longest_silence_s: float = 0.0
    silence_by_partition: dict[int, float] = field(default_factory=dict)
    group_missing: int = 0

    def problems(self, silence_bound_s: float | None) -> list[str]:
        found = [message for count, message in (
            (self.failed_sends, f"{self.failed_sends} sends failed"),
            (self.lost, f"{self.lost} acknowledged records lost"),
            (self.duplicated, f"{self.duplicated} records stored twice"),
            (self.out_of_order, f"partitions {self.out_of_order} out of send order"),
            (self.divergent, f"replicas differ: {self.divergent}"),
            (self.group_missing, f"the group never got {self.group_missing} acknowledged records"),
        ) if count]
        if silence_bound_s is not None and self.longest_silence_s > silence_bound_s:
            found.append(f"a partition went {self.longest_silence_s:.1f} s without an acknowledged write "
                         f"(bound {silence_bound_s:.1f} s)")
        return found


async def finish_and_check(cluster: HostedCluster, load: Workload, *, silence_window: tuple[float, float]) -> Verdict:
    """Stop the workload after the network healed; check the log, the group and every replica."""
    producer, reader = load.producer, load.reader
    await producer.stop()
    verdict = Verdict(failed_sends=len(producer.failures))
    acked = {p: list(v) for p, v in producer.acked.items()}
    verdict.acknowledged = sum(len(v) for v in acked.values())
    every_acked = {value for values in acked.values() for value in values}
    await reader.drain(every_acked)
    await reader.stop()
    verdict.group_missing = len(every_acked - reader.values)
    stored = await consume_everything(cluster.deployment.bootstrap, PARTITIONS, verdict.acknowledged)
    for partition, values in acked.items():
        data = stored[partition]
        verdict.duplicated += len(data) - len(set(data))
        if data != sorted(data):
            verdict.out_of_order.append(partition)
        verdict.lost += len(set(values) - set(data))
    verdict.longest_silence_s = longest_silence_s(producer.ack_times, *silence_window)
    verdict.silence_by_partition = {p: round(longest_silence_s({p: times}, *silence_window), 1)
                                    for p, times in producer.ack_times.items()}
    await cluster.wait_in_sync()
    verdict.divergent = await divergent_replicas(cluster)
    return verdict


async def divergent_replicas(cluster: HostedCluster) -> list[str]:
    """Stop every broker (cleanly: the cluster is quiet) and compare each partition's replicas byte for byte."""
    from tideway_server.brokers.storage.config import TopicConfig
    from tideway_server.brokers.storage.log import Log

    await asyncio.sleep(2)  # (the followers fetch what the leader last appended)
    for broker in cluster.deployment.brokers.values():
        await asyncio.to_thread(broker.terminate)
    differences = []
    for partition in range(PARTITIONS):
        contents = {}
        for broker_id, broker in cluster.deployment.brokers.items():
            log_ = Log.open(str(broker.data_dir / f"{TOPIC}-{partition}"), TOPIC, partition, TopicConfig(),
                            recovery_point=0)
            try:
                end, chunks, offset = log_.log_end_offset, [], log_.log_start_offset
                while offset < end:
                    data = log_.read(offset, 1 << 20, max_offset=end).records
                    if not data:
                        break
                    chunks.append(bytes(data))
                    offset = _next_offset(data)
                contents[broker_id] = (log_.log_start_offset, end, b"".join(chunks))
            finally:
                log_.close()
        if len(set(contents.values())) > 1:
            ends = {broker_id: (start, end, len(data)) for broker_id, (start, end, data) in contents.items()}
            differences.append(f"{TOPIC}-{partition}: (start, end, bytes) per broker {ends}")
    return differences


def _next_offset(data: bytes) -> int:
    """The offset after the last whole batch in ``data``."""
    from tideway.record.batch import read_header

    position, following = 0, 0
    while position + 61 <= len(data):
        header = read_header(data, position)
        following = header.base_offset + header.last_offset_delta + 1
        position += header.batch_length + 12
    return following
