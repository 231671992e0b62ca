"""Stream groups under churn on a real cluster (issue 4).

Members (separate processes) join, leave cleanly and are SIGKILLed while
messages flow, and the group's coordinator broker is SIGKILLed once. From the
members' own logs (monotonic times, shared across processes) the test checks:

* a partition never has two owners at once;
* no record below an offset already committed is ever delivered again
  (clean hand-overs start exactly at the committed offset);
* committed offsets survive the coordinator's failover;
* every produced record is delivered.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time

import pytest

from tests.harness.processes import REPO_ROOT
from tideway.native import Producer, TidewayClient
from tideway.native.group import CoordinatorLink, fetch_committed
from tideway.protocol import messages as m

pytestmark = [pytest.mark.timeout(300), pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)]

TOPIC, GROUP, PARTITIONS = "clicks", "analytics", 6


class MemberProcess:
    def __init__(self, bootstrap: str, log_path) -> None:
        self.log_path = log_path
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.fault.group_member", bootstrap, GROUP, TOPIC, str(log_path)],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=open(str(log_path) + ".err", "ab"),
        )
        self.killed_at: float | None = None

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)
        self.killed_at = time.monotonic()

    def stop(self) -> None:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(30)

    def events(self) -> list[dict]:
        return [json.loads(line) for line in open(self.log_path) if line.strip()]


def ownership_intervals(member: MemberProcess, end: float) -> list[tuple[int, float, float]]:
    held: dict[int, float] = {}
    out = []
    for event in member.events():
        if event["event"] == "assigned":
            for p in event["partitions"]:
                held[p] = event["t"]
        elif event["event"] in ("revoked", "lost"):
            for p in event["partitions"]:
                out.append((p, held.pop(p), event["t"]))
    finish = member.killed_at if member.killed_at is not None else end
    out += [(p, start, finish) for p, start in held.items()]
    return out


async def test_groups_under_churn_and_coordinator_failover(deployment_factory, tmp_path):
    deployment = deployment_factory(brokers=3)
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    await deployment.wait_until(lambda s: sum(1 for p in s.partitions if p.topic == TOPIC and len(p.isr) == 3) == PARTITIONS, what="topic")
    produced = 0
    stop_producing = asyncio.Event()

    async def produce():
        nonlocal produced
        async with Producer(deployment.bootstrap, acks="all", linger_ms=2) as producer:
            while not stop_producing.is_set():
                futures = [await producer.send(TOPIC, b"x" * 20, partition=i % PARTITIONS) for i in range(60)]
                await asyncio.gather(*futures)
                produced += len(futures)
                await asyncio.sleep(0.05)

    producing = asyncio.ensure_future(produce())
    members: list[MemberProcess] = []

    def spawn():
        members.append(MemberProcess(deployment.bootstrap, tmp_path / f"member-{len(members)}.log"))

    for _ in range(3):
        spawn()
    await asyncio.sleep(4)
    spawn()  # join
    await asyncio.sleep(3)
    members[0].stop()  # leave cleanly
    await asyncio.sleep(3)
    members[1].kill()  # crash
    spawn()
    await asyncio.sleep(3)

    # Kill the coordinator broker, remembering what was committed.
    async with TidewayClient(deployment.bootstrap) as client:
        link = CoordinatorLink(client, GROUP)
        coordinator_id = await link.find()
        before = await fetch_committed(link, [(TOPIC, p) for p in range(PARTITIONS)])
    coordinator = deployment.brokers[coordinator_id]
    coordinator.kill()
    await asyncio.sleep(4)
    async with TidewayClient(",".join(b.bootstrap for b in deployment.brokers.values() if b.alive())) as client:
        after = await fetch_committed(CoordinatorLink(client, GROUP), [(TOPIC, p) for p in range(PARTITIONS)])
    assert all(after[tp] >= before[tp] for tp in before), f"commits lost in the coordinator failover: {before} -> {after}"
    coordinator.restart()
    members[2].kill()
    spawn()
    await asyncio.sleep(4)
    stop_producing.set()
    await producing

    # Let the survivors drain everything, then stop them cleanly.
    async with TidewayClient(deployment.bootstrap) as client:
        ends = {p: (await client.list_offset(TOPIC, p, m.LATEST_TIMESTAMP))[0] for p in range(PARTITIONS)}
        link = CoordinatorLink(client, GROUP)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            committed = await fetch_committed(link, [(TOPIC, p) for p in range(PARTITIONS)])
            if all(committed[(TOPIC, p)] >= ends[p] for p in range(PARTITIONS)):
                break
            await asyncio.sleep(0.5)
        final = await fetch_committed(link, [(TOPIC, p) for p in range(PARTITIONS)])
    for member in members:
        if member.process.poll() is None:
            member.stop()
    end = time.monotonic()
    assert sum(ends.values()) == produced
    assert all(final[(TOPIC, p)] == ends[p] for p in range(PARTITIONS)), f"not everything consumed: {final} vs {ends}"

    # 1. Never two owners at once.
    intervals = [(p, start, stop, i) for i, member in enumerate(members) for p, start, stop in ownership_intervals(member, end)]
    for p in range(PARTITIONS):
        spans = sorted((start, stop, i) for q, start, stop, i in intervals if q == p)
        for (s1, e1, m1), (s2, _e2, m2) in zip(spans, spans[1:], strict=False):
            assert s2 >= e1, f"partition {p} owned by member {m1} [{s1:.3f}, {e1:.3f}] and member {m2} from {s2:.3f}"
    # 2. Nothing below a committed offset is delivered again; 3. everything is delivered.
    commits = sorted((e["t"], e["partition"], e["offset"]) for member in members for e in member.events() if e["event"] == "commit")
    deliveries = sorted((e["t"], e["partition"], e["offsets"]) for member in members for e in member.events() if e["event"] == "records")
    delivered: dict[int, set[int]] = {p: set() for p in range(PARTITIONS)}
    high: dict[int, int] = dict.fromkeys(range(PARTITIONS), 0)
    index = 0
    for t, p, offsets in deliveries:
        while index < len(commits) and commits[index][0] < t:
            _, cp, co = commits[index]
            high[cp] = max(high[cp], co)
            index += 1
        assert min(offsets) >= high[p], f"partition {p}: offset {min(offsets)} delivered after {high[p]} was committed"
        delivered[p].update(offsets)
    for p in range(PARTITIONS):
        assert delivered[p] == set(range(ends[p])), f"partition {p}: {ends[p] - len(delivered[p])} records never delivered"
    assert len(members) == 6 and sum(1 for mb in members if mb.killed_at) == 2
