"""Benchmark a real 3-broker cluster with its controller: replication cost and failover.

Starts a controller (SQLite in a temporary directory) and three brokers on free
loopback ports, then measures with the async client in this process:

* produce msgs/s of 100-byte messages to a 3-partition topic with RF=1 and
  acks=1, and to one with RF=3 and acks=all (idempotent), in the same run;
* failover: SIGKILL the leader of partition 0, time until an acks=all write to
  it succeeds on the new leader; restart the broker, wait until it is back in
  sync; several rounds.

Prints one JSON object on stdout; progress on stderr.

    .venv/bin/python bench/cluster.py            # about a minute
    .venv/bin/python bench/cluster.py --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.common import OPERATOR, CpuMeter, free_port, progress, wait_port  # noqa: E402
from tideway.native import Producer, TidewayClient  # noqa: E402
from tideway.native.conn import connect  # noqa: E402
from tideway.protocol import errors  # noqa: E402
from tideway.protocol import messages as m  # noqa: E402
from tideway.protocol.messages import ApiKey  # noqa: E402


class Cluster:
    def __init__(self, home: str) -> None:
        self.home = home
        self.env = {**os.environ, "TIDEWAY_HOME": home, "TIDEWAY_LOG_LEVEL": "WARNING"}
        self.env.pop("DATABASE_URL", None)
        self.controller_port = free_port()
        self.ports = {i: free_port() for i in (1, 2, 3)}
        self.processes: dict[str, subprocess.Popen] = {}

    def _spawn(self, name: str, args: list[str]) -> None:
        log = open(os.path.join(self.home, f"{name}.log"), "ab")
        self.processes[name] = subprocess.Popen([sys.executable, "-m", "tideway_server.cli.main", *args], cwd=REPO_ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> None:
        self._spawn("controller", ["controller", "--listen", f"127.0.0.1:{self.controller_port}", "--broker-session-timeout-ms", "2000", "--lease-ms", "2000"])
        wait_port(self.controller_port)
        for i in self.ports:
            self.start_broker(i)

    def start_broker(self, i: int) -> None:
        self._spawn(f"broker-{i}", ["broker", "--id", str(i), "--data", os.path.join(self.home, f"broker-{i}"), "--listen", f"127.0.0.1:{self.ports[i]}",
                                     "--internal-listen", "127.0.0.1:0", "--controller", f"127.0.0.1:{self.controller_port}", "--metrics-listen", "off", "--replica-lag-time-max-ms", "2000"])
        wait_port(self.ports[i])

    def kill_broker(self, i: int) -> None:
        process = self.processes[f"broker-{i}"]
        process.send_signal(signal.SIGKILL)
        process.wait(10)

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.ports.values())

    async def describe(self) -> m.DescribeClusterResponse:
        connection = await connect("127.0.0.1", self.controller_port, credentials=OPERATOR)
        try:
            return await connection.request(ApiKey.DESCRIBE_CLUSTER, m.DescribeClusterRequest())
        finally:
            connection.close()

    async def wait(self, predicate, timeout_s: float = 60) -> m.DescribeClusterResponse:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            state = await self.describe()
            if predicate(state):
                return state
            await asyncio.sleep(0.1)
        raise SystemExit("cluster did not reach the expected state")


async def produce(bootstrap: str, topic: str, count: int, acks) -> dict:
    value = os.urandom(100)
    async with Producer(bootstrap, acks=acks, linger_ms=5, batch_size_bytes=256 << 10) as producer:
        with CpuMeter() as meter:
            for i in range(count):
                await producer.send(topic, value, partition=i % 3)
            await producer.flush()
    elapsed = meter.seconds
    return {"messages": count, "seconds": round(elapsed, 3), "msgs_per_s": round(count / elapsed), "mb_per_s": round(count * 100 / elapsed / 1e6, 1),
            "cpu_s_per_million": meter.cpu_s_per_million(count)}


async def failover_round(cluster: Cluster, topic: str) -> float:
    state = await cluster.describe()
    leader = next(p.leader for p in state.partitions if p.topic == topic and p.partition == 0)
    killed = time.monotonic()
    cluster.kill_broker(leader)
    async with Producer(cluster.bootstrap, acks="all", linger_ms=0, retries=0, request_timeout_ms=2000) as probe:
        while True:
            try:
                await probe.send_and_wait(topic, b"probe", partition=0)
                break
            except errors.TidewayError:
                await asyncio.sleep(0.02)
    seconds = time.monotonic() - killed
    cluster.start_broker(leader)
    await cluster.wait(lambda s: all(len(p.isr) == 3 for p in s.partitions if p.topic == topic))
    return seconds


async def run(args: argparse.Namespace, cluster: Cluster) -> dict:
    await cluster.wait(lambda s: sum(b.state == "alive" for b in s.brokers) == 3)
    async with TidewayClient(cluster.bootstrap) as client:
        await client.create_topic("rf1", partitions=3, replication_factor=1)
        await client.create_topic("rf3", partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
    await cluster.wait(lambda s: sum(1 for p in s.partitions if p.topic == "rf3" and len(p.isr) == 3) == 3)
    count = 100_000 if args.quick else 400_000
    progress(f"RF=1 acks=1: {count} x 100 B")
    rf1 = await produce(cluster.bootstrap, "rf1", count, 1)
    progress(f"RF=3 acks=all: {count} x 100 B")
    rf3 = await produce(cluster.bootstrap, "rf3", count, "all")
    rounds = 2 if args.quick else 3
    failovers = []
    for i in range(rounds):
        progress(f"failover round {i + 1} of {rounds}")
        failovers.append(round(await failover_round(cluster, "rf3"), 2))
    return {
        "produce_rf1_acks1_100B": rf1,
        "produce_rf3_acksall_100B": rf3,
        "rf3_over_rf1": round(rf3["msgs_per_s"] / rf1["msgs_per_s"], 2),
        "failover_seconds_kill_to_first_acked_write": failovers,
        "broker_session_timeout_ms": 2000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer messages and rounds")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tideway-cluster-bench-") as home:
        cluster = Cluster(home)
        cluster.start()
        try:
            try:
                import uvloop

                results = uvloop.run(run(args, cluster))
            except ImportError:
                results = asyncio.run(run(args, cluster))
        finally:
            cluster.stop()
    print(json.dumps({"benchmark": "cluster", "mode": "quick" if args.quick else "full",
                      "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}, **results}, indent=2))


if __name__ == "__main__":
    main()
