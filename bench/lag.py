"""Benchmark lag sampling, alert evaluation and the consumer_lag job with many groups.

1. **Sampling**: a real broker with ``--groups`` groups (10 per queue, each committed somewhere behind the log
   end); ``--rounds`` looks (platform/lag/sampler.py), timed: wall time and this process's CPU per look, and the
   broker's CPU per look (from /proc).
2. **Produce and consume with sampling**: the produce and consume figures of bench/broker.py on the same broker,
   with a process looking at every group once a second (five times the default rate) and without, alternating.
   Target: within 2%.
3. **Evaluation**: one rule per group (lag in seconds) in a control-plane database of its own (SQLite), evaluated
   against the looks: CPU per round. Target: under 100 ms of a core per round.
4. **The consumer_lag job** over ``--hours`` (default 24) of looks every 5 s at every group, written to
   ``__lag`` as the sampler writes them and ending now: the first run (which reads from the start of
   yesterday: minute, hour and, for yesterday, day rollups) and then a run a few minutes later as Celery beat
   makes them (it reads only the last hour), each on ``local[2]`` with the Spark part and the database writes.

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/lag.py                  # 1,000 groups, a day of samples
    .venv/bin/python bench/lag.py --hours 1        # a quicker job phase
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT)]

from bench.broker import consume_phase, produce_phase, start_broker  # noqa: E402
from bench.common import free_port, progress  # noqa: E402

GROUPS_PER_QUEUE = 10
TENANT = 1


def _queues(groups: int):
    from tideway_server.lag.sampler import QueueRef

    return [QueueRef(tenant_id=TENANT, name=f"q{i}", broker_topic=f"t{TENANT}.q{i}", dead_letter_topic="", partitions=1)
            for i in range(max(1, groups // GROUPS_PER_QUEUE))]


async def setup_groups(bootstrap: str, groups: int) -> None:
    from tideway.native import Producer, TidewayClient
    from tideway.native.group import CoordinatorLink, commit_offsets

    queues = _queues(groups)
    async with TidewayClient(bootstrap) as client:
        for q in queues:
            await client.create_topic(q.broker_topic, partitions=1)
        async with Producer(client, acks=1, linger_ms=5) as producer:
            for q in queues:
                for _ in range(200):
                    await producer.send(q.broker_topic, b"x" * 100, partition=0)
            await producer.flush()
        for i, q in enumerate(queues):
            for g in range(GROUPS_PER_QUEUE):
                link = CoordinatorLink(client, f"t{TENANT}.stream.g{g}-{i}")
                await commit_offsets(link, {(q.broker_topic, 0): 10 * g + 5})


def _cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def sampling_phase(bootstrap: str, groups: int, rounds: int, broker_pid: int) -> tuple[dict, list[dict]]:
    from tideway_server.lag.sampler import group_key, sample_cluster

    from tideway.native import TidewayClient

    queues = _queues(groups)
    walls, cpus, broker_cpus = [], [], []
    previous: dict = {}
    samples: list[dict] = []
    async with TidewayClient(bootstrap) as client:
        for _ in range(rounds + 1):
            wall, cpu, broker = time.perf_counter(), time.process_time(), _cpu_of(broker_pid)
            samples = await sample_cluster(client, queues, previous)
            walls.append(time.perf_counter() - wall)
            cpus.append(time.process_time() - cpu)
            broker_cpus.append(_cpu_of(broker_pid) - broker)
            previous = {(s["tenant_id"], group_key(s["queue"], s["kind"], s["group"])): s for s in samples}
            await asyncio.sleep(0.5)
    walls, cpus, broker_cpus = walls[1:], cpus[1:], broker_cpus[1:]  # the first look warms connections up
    return {"groups_seen": len(samples), "rounds": rounds, "wall_ms_median": round(statistics.median(walls) * 1000, 1),
            "sampler_cpu_ms_median": round(statistics.median(cpus) * 1000, 1),
            "broker_cpu_ms_median": round(statistics.median(broker_cpus) * 1000, 1)}, samples


def _look_forever(bootstrap: str, groups: int, interval_s: float) -> None:
    sys.path[:0] = [str(REPO_ROOT)]
    from tideway_server.lag.sampler import sample_cluster

    from tideway.native import TidewayClient

    async def loop() -> None:
        async with TidewayClient(bootstrap) as client:
            while True:
                await sample_cluster(client, _queues(groups), {})
                await asyncio.sleep(interval_s)

    asyncio.run(loop())


def traffic_phase(bootstrap: str, groups: int, runs: int) -> dict:
    from tideway.native import TidewayClient

    out = {mode: {"produce": [], "consume": [], "produce_cpu_s_per_million": [], "consume_cpu_s_per_million": []}
           for mode in ("without", "with")}
    for n in range(runs):
        for mode in ("without", "with"):
            looker = None
            if mode == "with":
                looker = multiprocessing.Process(target=_look_forever, args=(bootstrap, groups, 1.0), daemon=True)
                looker.start()
                time.sleep(2)
            topic = f"t{TENANT}.traffic-{mode}-{n}"

            async def once(topic=topic) -> tuple[dict, dict]:
                async with TidewayClient(bootstrap) as client:
                    await client.create_topic(topic, partitions=1)
                produced = await produce_phase(bootstrap, topic, 300_000, 100)
                consumed = await consume_phase(bootstrap, topic, 300_000, 100)
                return produced, consumed

            produced, consumed = asyncio.run(once())
            out[mode]["produce"].append(produced["msgs_per_s"])
            out[mode]["consume"].append(consumed["msgs_per_s"])
            out[mode]["produce_cpu_s_per_million"].append(produced["cpu_s_per_million"])
            out[mode]["consume_cpu_s_per_million"].append(consumed["cpu_s_per_million"])
            progress(f"{mode} sampling: produce {produced['msgs_per_s']:,} msgs/s ({produced['cpu_s_per_million']} CPU s per 1M), "
                     f"consume {consumed['msgs_per_s']:,} ({consumed['cpu_s_per_million']})")
            if looker is not None:
                looker.terminate()
                looker.join(10)
    for kind in ("produce", "consume"):
        without, with_ = statistics.median(out["without"][kind]), statistics.median(out["with"][kind])
        out[f"{kind}_change_percent"] = round(100 * (with_ - without) / without, 1)
    out["target_percent"] = -2
    return out


def evaluation_phase(samples: list[dict], rounds: int) -> dict:
    from tideway_server.alerts.evaluate import evaluate_all
    from tideway_server.alerts.models import AlertRule
    from tideway_server.lag.sampler import group_key
    from tideway_server.tenants.models import Tenant

    tenant = Tenant.objects.get(pk=TENANT)
    AlertRule.objects.bulk_create([
        AlertRule(tenant=tenant, name=f"rule-{i}", metric="lag_seconds", queue=s["queue"], group=s["group"], comparator=">",
                  threshold=3600, recovery_threshold=60) for i, s in enumerate(samples)])
    live = {TENANT: {group_key(s["queue"], s["kind"], s["group"]): s for s in samples}}
    cpus, walls = [], []
    for _ in range(rounds):
        now_ms = int(time.time() * 1000)
        for s in samples:
            s["at_ms"] = now_ms  # fresh looks
        cpu, wall = time.process_time(), time.perf_counter()
        counts = evaluate_all(live, stale_ms=20_000)
        cpus.append(time.process_time() - cpu)
        walls.append(time.perf_counter() - wall)
    return {"rules": counts["rules"], "rounds": rounds, "cpu_ms_median": round(statistics.median(cpus) * 1000, 1),
            "wall_ms_median": round(statistics.median(walls) * 1000, 1), "target_cpu_ms": 100}


async def write_lag(bootstrap: str, samples: list[dict], hours: float, end_ms: int) -> int:
    """Looks every 5 s for ``hours``, the last one just before ``end_ms``."""
    from tideway_server.lag.store import LAG_SETTINGS, LAG_TOPIC, lag_records

    from tideway.native import Producer, TidewayClient
    from tideway.protocol import errors

    async with TidewayClient(bootstrap) as client:
        try:
            await client.create_topic(LAG_TOPIC, partitions=1, configs=LAG_SETTINGS)
        except errors.TopicAlreadyExistsError:
            pass
    rounds = int(hours * 3600 / 5)
    start_ms = end_ms - rounds * 5000
    written = 0
    async with Producer(bootstrap, acks=1, linger_ms=20, compression="zstd", batch_size_bytes=1 << 20) as producer:
        for r in range(rounds):
            at = start_ms + r * 5000
            for s in samples:  # the lag grows through the day, differently per group
                row = s["partitions"][0]
                row[1] = row[1] + (r % 7 == 0)
                row[3], row[4] = (r * 3 + hash(s["group"]) % 50) % 500, (r * 5000) % 3_600_000
            for record in lag_records("bench", samples, at):
                await producer.send(LAG_TOPIC, record, partition=0, timestamp_ms=at)
                written += 1
            if r % 1000 == 0:
                progress(f"__lag: {r:,} of {rounds:,} looks written")
        await producer.flush()
    return rounds


def job_phase(bootstrap: str, samples: list[dict], hours: float) -> dict:
    from tideway_server.lag.job import run_consumer_lag

    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    rounds = asyncio.run(write_lag(bootstrap, samples, hours, end_ms=now_ms - 300_000))  # up to five minutes ago
    write_s = time.perf_counter() - started
    progress(f"{rounds:,} looks of {len(samples):,} groups in {write_s:.0f} s; running consumer_lag")
    first = run_consumer_lag(master="local[2]", bootstrap=bootstrap, progress=progress)
    asyncio.run(write_lag(bootstrap, samples, 5 / 60, end_ms=now_ms))  # the five minutes since, as beat's next run finds them
    later = run_consumer_lag(master="local[2]", bootstrap=bootstrap, progress=progress)
    return {"hours": hours, "looks": rounds, "groups": len(samples), "samples": rounds * len(samples),
            "write_s": round(write_s, 1), "first_run": first, "next_run": later}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10, help="looks and evaluation rounds to time")
    parser.add_argument("--traffic-runs", type=int, default=2, help="produce/consume runs with and without sampling")
    parser.add_argument("--hours", type=float, default=24.0, help="hours of looks for the job phase (0: skip it)")
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="tideway-bench-lag-home-")
    os.environ["TIDEWAY_HOME"] = home
    os.environ.pop("DATABASE_URL", None)
    from tideway_server.cli.django_setup import setup_django

    setup_django(migrate=True)
    from tideway_server.tenants.actions import do_signup

    do_signup(username="bench", password="a long bench password", email="b@example.com", tenant_name="Bench")
    data_dir = tempfile.mkdtemp(prefix="tideway-bench-lag-")
    port = free_port()
    broker = start_broker(data_dir, port, ("--usage-interval-ms", "0"))
    bootstrap = f"127.0.0.1:{port}"
    try:
        progress(f"{args.groups:,} groups on {args.groups // GROUPS_PER_QUEUE} queues")
        asyncio.run(setup_groups(bootstrap, args.groups))
        sampling, samples = asyncio.run(sampling_phase(bootstrap, args.groups, args.rounds, broker.pid))
        progress(f"sampling: {sampling}")
        evaluation = evaluation_phase([dict(s) for s in samples], args.rounds)
        progress(f"evaluation: {evaluation}")
        traffic = traffic_phase(bootstrap, args.groups, args.traffic_runs) if args.traffic_runs else None
        job = job_phase(bootstrap, samples, args.hours) if args.hours else None
    finally:
        broker.terminate()
        broker.wait(30)
    print(json.dumps({"benchmark": "lag", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                      "sampling": sampling, "evaluation": evaluation, "traffic": traffic, "job": job}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
