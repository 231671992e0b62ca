"""Benchmark how Tideway scales with tenants' objects rather than traffic; prints the curves as JSON.

Curves (``--curves``, comma-separated; default all):

* ``partitions``: one broker; for 1, 10, 100 and 1,000 partitions in one
  topic, produce 200,000 x 100 B spread over them evenly (message i to
  partition i mod P; acks=1, linger 5 ms) three times (the median, and the
  first run, to new partitions, on its own), then the broker's open files
  and its CPU while idle for 5 s;

* ``queues``: one tenant on the enterprise plan creates queues over REST
  (default settings: a queue and its dead-letter topic, replication factor
  3) in a whole deployment (Redis, a controller, 3 brokers, a Celery worker
  and ``tideway serve``, as the tests start them). For each mark (10, 100,
  1,000 existing queues by default) the median time of the 10 creates
  before it, and how long ``GET /api/v1/queues/`` (its first page) takes
  there; ``last_100_over_first_100`` compares the medians of the last and
  the first 100 creates (creation in constant time keeps it near 1).

* ``subscribers``: in the same deployment, a queue (3 partitions,
  replication factor 3) and, for each count (0, 10, 100 by default;
  ``--subscribers``), that many idle WebSocket subscribers of one group
  (prefetch 10, nothing published); after 3 s, the brokers' CPU (the three
  summed, % of one core) and the gateway's over 10 s.

* ``active``: in the same deployment, a queue (3 partitions, replication
  factor 3) and 0, 10, 100 and 1,000 WebSocket subscribers (``--active``;
  prefetch 10, each acknowledging a delivery at once) while 1,000 msgs/s are
  published over REST (10 a request) for 15 s: what was delivered,
  subscribers left without messages, throttle frames, publish and
  publish-to-push latency, and the brokers' and the gateway's CPU.

* ``groups``: one broker (idle share-partitions unloaded after 5 s) and a
  queue of 4 partitions holding 20,000 x 100 B; for 1, 10 and 100 groups
  (``--groups``): queue groups, ten at a time, each receive (1,000 a call)
  and accept every message; then stream groups, all at once in one process
  sharing one client, each read every record and commit after every batch.
  For each: messages/s over all groups, the broker's CPU seconds per group,
  its RSS before, after and (queue groups) once the idle groups unloaded,
  partitions stream members lost for want of a coordinator's answer, and
  the warnings and errors the broker logged.

Progress goes to stderr.

    .venv/bin/python bench/scale.py --curves queues            # about 3 minutes
    .venv/bin/python bench/scale.py --curves queues --queues 200
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.common import CpuMeter, free_port, progress  # noqa: E402
from tests.harness.control_plane import running_control_plane  # noqa: E402

CURVES = ("partitions", "groups", "queues", "subscribers", "active")
PARTITION_COUNTS = (1, 10, 100, 1_000)
REPEATS = 3  # produce runs per partition count (the median is reported, and the first run on its own)


def _cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


async def _produce_spread(bootstrap: str, topic: str, partitions: int, count: int) -> dict:
    from tideway.native import Producer

    value = os.urandom(100)
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=512 << 10) as producer:
        with CpuMeter() as meter:
            send = producer.send
            for i in range(count):
                await send(topic, value, partition=i % partitions)
            await producer.flush()
    return {"msgs_per_s": round(count / meter.seconds), "cpu_s_per_million": meter.cpu_s_per_million(count)}


def partitions_curve(count: int = 200_000) -> dict:
    import asyncio

    from bench.broker import start_broker
    from tideway.native import TidewayClient

    out = {}
    with tempfile.TemporaryDirectory(prefix="tideway-bench-scale-partitions-") as data:
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        broker = start_broker(data, port)
        try:
            for partitions in PARTITION_COUNTS:
                topic = f"t1.p{partitions}"

                async def create(topic=topic, partitions=partitions) -> None:
                    async with TidewayClient(bootstrap) as client:
                        await client.create_topic(topic, partitions=partitions)

                asyncio.run(create())
                progress(f"{partitions:,} partitions: produce {count:,} x 100 B spread over them, {REPEATS} times")
                runs = [asyncio.run(_produce_spread(bootstrap, topic, partitions, count)) for _ in range(REPEATS)]
                # The first run also pays for what a new partition does once (its first segment, its first
                # epoch); the median is the steady rate, and this machine's speed moves between runs.
                figures = {"msgs_per_s": statistics.median(r["msgs_per_s"] for r in runs),
                           "cpu_s_per_million": statistics.median(r["cpu_s_per_million"] for r in runs),
                           "first_msgs_per_s": runs[0]["msgs_per_s"], "runs_msgs_per_s": [r["msgs_per_s"] for r in runs]}
                time.sleep(1)
                before = _cpu_s(broker.pid)
                time.sleep(5)
                figures["idle_cpu_percent"] = round((_cpu_s(broker.pid) - before) / 5 * 100, 1)
                figures["open_files"] = len(os.listdir(f"/proc/{broker.pid}/fd"))
                out[str(partitions)] = figures
        finally:
            broker.terminate()
            broker.wait(30)
    return out


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def groups_curve(counts: list[int], messages: int = 20_000, partitions: int = 4) -> dict:
    """Queue groups and stream groups on one broker: throughput, CPU and memory per group, lost partitions."""
    import asyncio

    from bench.broker import start_broker
    from tideway.native import Producer, TidewayClient
    from tideway.native.group import GroupConsumer
    from tideway.native.queue import QueueConsumer

    async def fill(bootstrap: str) -> None:
        async with TidewayClient(bootstrap) as client:
            await client.create_topic("work", partitions=partitions)
        async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=512 << 10) as producer:
            value = os.urandom(100)
            for i in range(messages):
                await producer.send("work", value, partition=i % partitions)
            await producer.flush()

    async def queue_group(bootstrap: str, group: str) -> int:
        done = 0
        async with QueueConsumer(bootstrap, group, "work") as queue:
            while done < messages:
                received = await queue.receive(1000, wait_ms=1000)
                if not received:
                    raise SystemExit(f"queue group {group} got nothing after {done} messages")
                await queue.ack(received)
                done += len(received)
        return done

    async def queue_groups(bootstrap: str, count: int, prefix: str) -> int:
        done = 0
        for first in range(0, count, 10):
            done += sum(await asyncio.gather(*(queue_group(bootstrap, f"{prefix}-{n}") for n in range(first, min(count, first + 10)))))
        return done

    async def stream_groups(bootstrap: str, count: int, prefix: str) -> tuple[int, int]:
        lost: list[str] = []
        async with TidewayClient(bootstrap) as client:
            members = [GroupConsumer(client, f"{prefix}-{n}", ["work"], auto_offset_reset="earliest", enable_auto_commit=False,
                                     on_lost=lambda tps: lost.append("lost")) for n in range(count)]
            await asyncio.gather(*(member.start() for member in members))

            async def read(member: GroupConsumer) -> int:
                got = 0
                while got < messages:
                    batch = await member.getmany(1000, max_records=1000)
                    got += sum(len(records) for records in batch.values())
                    if batch:
                        await member.commit()
                return got

            try:
                done = sum(await asyncio.gather(*(read(member) for member in members)))
            finally:
                await asyncio.gather(*(member.stop() for member in members))
        return done, len(lost)

    def logged(log_path: str, since: int) -> tuple[int, list[str]]:
        """The log's warnings, errors and tracebacks after byte ``since``, and where the log ends now."""
        with open(log_path, "rb") as log_file:
            log_file.seek(since)
            lines = [line.decode(errors="replace").rstrip() for line in log_file]
            end = log_file.tell()
        return end, [line for line in lines if " WARNING " in line or " ERROR " in line or "Traceback" in line]

    out: dict = {"messages_per_group": messages, "partitions": partitions}
    with tempfile.TemporaryDirectory(prefix="tideway-bench-scale-groups-") as data:
        port = free_port()
        bootstrap = f"127.0.0.1:{port}"
        log_path = os.path.join(data, "broker.log")
        with open(log_path, "ab") as log_file:
            broker = start_broker(os.path.join(data, "broker"), port, ("--queue-idle-unload-ms", "5000"), log_file=log_file)
        try:
            asyncio.run(fill(bootstrap))
            seen, _ = logged(log_path, 0)
            for kind in ("queue", "stream"):
                for count in counts:
                    progress(f"{count:,} {kind} groups each process {messages:,} messages")
                    time.sleep(1)
                    rss_before, cpu_before = _rss_mib(broker.pid), _cpu_s(broker.pid)
                    started = time.perf_counter()
                    figures: dict = {}
                    if kind == "queue":
                        done = asyncio.run(queue_groups(bootstrap, count, f"q{count}"))
                    else:
                        done, figures["partitions_lost"] = asyncio.run(stream_groups(bootstrap, count, f"s{count}"))
                    seconds = time.perf_counter() - started
                    figures.update(msgs_per_s=round(done / seconds), broker_cpu_s_per_group=round((_cpu_s(broker.pid) - cpu_before) / count, 3),
                                   rss_mib_before=rss_before, rss_mib_after=_rss_mib(broker.pid))
                    if kind == "queue":
                        time.sleep(5 + 5 + 1)  # idle for 5 s, and the next look for idle ones (every 5 s here)
                        figures["rss_mib_after_unload"] = _rss_mib(broker.pid)
                    seen, lines = logged(log_path, seen)
                    figures["broker_warnings_and_errors"] = len(lines)
                    figures["first_warnings"] = lines[:3]
                    progress(f"  {figures}")
                    out.setdefault(f"{kind}_groups", {})[str(count)] = figures
        finally:
            broker.terminate()
            broker.wait(30)
    return out


def queues_curve(plane, count: int) -> dict:
    """Create ``count`` queues for one tenant; time each create and the list at the marks."""
    _slug, key = plane.create_tenant(plan="enterprise")
    marks = [m for m in (10, 100, 1_000, 10_000) if m <= count]
    creates: list[float] = []
    listed: dict[int, float] = {}
    with plane.client(key) as api:
        for i in range(count):
            started = time.perf_counter()
            answer = api.post("/api/v1/queues/", json={"name": f"scale-{i:05d}"})
            creates.append(time.perf_counter() - started)
            if answer.status_code != 201:
                raise SystemExit(f"create {i + 1} failed: {answer.status_code} {answer.text}")
            if i + 1 in marks:
                started = time.perf_counter()
                assert api.get("/api/v1/queues/").status_code == 200
                listed[i + 1] = time.perf_counter() - started
                progress(f"{i + 1:,} queues: create {statistics.median(creates[-10:]) * 1000:.0f} ms "
                         f"(median of the last 10), list {listed[i + 1] * 1000:.0f} ms")
    ms = lambda seconds: round(seconds * 1000, 1)  # noqa: E731
    out = {"queues": count,
           "create_ms_median_at": {str(mark): ms(statistics.median(creates[mark - 10:mark])) for mark in marks},
           "list_first_page_ms_at": {str(mark): ms(seconds) for mark, seconds in listed.items()}}
    if count >= 200:
        first, last = statistics.median(creates[:100]), statistics.median(creates[-100:])
        out.update(first_100_median_ms=ms(first), last_100_median_ms=ms(last), last_100_over_first_100=round(last / first, 2))
    return out


def _subscribed_queue(plane, name: str, *, plan: str) -> tuple[dict, str, list[int]]:
    """A new tenant's queue (3 partitions, replication factor 3): its key's headers, WebSocket URL, the brokers' pids."""
    _slug, key = plane.create_tenant(plan=plan)
    with plane.client(key) as api:
        answer = api.post("/api/v1/queues/", json={"name": name, "partitions": 3, "replication_factor": 3})
        assert answer.status_code == 201, answer.text
    url = plane.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{name}"
    return {"Authorization": f"Bearer {key}"}, url, [b.process.pid for b in plane.deployment.brokers.values()]


def _cpu_percents(before: tuple[list[float], float], after: tuple[list[float], float], seconds: float) -> dict:
    """The brokers' (summed) and the gateway's CPU between two (brokers' CPU seconds, gateway's) readings."""
    return {"brokers_cpu_percent": round((sum(after[0]) - sum(before[0])) / seconds * 100, 1),
            "gateway_cpu_percent": round((after[1] - before[1]) / seconds * 100, 1)}


def _for_each(counts: list[int], saying, measure) -> dict:
    """``measure(count)`` (a coroutine) for each count, with progress; {count: figures}."""
    import asyncio

    out = {}
    for count in counts:
        progress(saying(count))
        out[str(count)] = asyncio.run(measure(count))
        progress(f"  {out[str(count)]}")
    return out


def subscribers_curve(plane, counts: list[int]) -> dict:
    """Brokers' and gateway's CPU with ``count`` idle WebSocket subscribers on one queue."""
    import asyncio

    from tests.harness.gateway import close_all, subscribe_many

    headers, url, brokers = _subscribed_queue(plane, "idle", plan="enterprise")

    async def measure(count: int) -> dict:
        sockets = await subscribe_many(url, headers, count, group="idle")
        try:
            await asyncio.sleep(3)
            before = [_cpu_s(pid) for pid in brokers], _cpu_s(plane.server.pid)
            await asyncio.sleep(10)
            after = [_cpu_s(pid) for pid in brokers], _cpu_s(plane.server.pid)
        finally:
            await close_all(sockets)
        return _cpu_percents(before, after, 10)

    return _for_each(counts, lambda count: f"{count:,} idle WebSocket subscribers for 10 s", measure)


def active_subscribers_curve(plane, counts: list[int], rate: int = 1_000, seconds: float = 15.0) -> dict:
    """WebSocket subscribers (prefetch 10, acking each delivery at once) while ``rate`` msgs/s are published over REST."""
    import asyncio
    import json

    import httpx

    from tests.harness.gateway import close_all, subscribe_many

    headers, url, brokers = _subscribed_queue(plane, "active", plan="business")

    async def measure(count: int) -> dict:
        sockets = await subscribe_many(url, headers, count, group="active")
        got = [0] * count
        push_ms: list[float] = []
        throttles = [0]
        stop = asyncio.Event()

        async def subscriber(index: int, ws) -> None:
            while not stop.is_set():
                try:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), 1.0))
                except TimeoutError:
                    continue
                if frame["type"] == "messages":
                    now = time.time()
                    got[index] += len(frame["messages"])
                    push_ms.extend((now - float(m["value"])) * 1000 for m in frame["messages"])
                    await ws.send(json.dumps({"type": "ack", "receipts": [m["receipt"] for m in frame["messages"]]}))
                elif frame["type"] == "throttle":
                    throttles[0] += 1

        readers = [asyncio.ensure_future(subscriber(i, ws)) for i, ws in enumerate(sockets)]
        publish_ms: list[float] = []
        per_request = max(1, rate // 100)  # a request every 10 ms
        published = 0
        before = [_cpu_s(pid) for pid in brokers], _cpu_s(plane.server.pid)
        async with httpx.AsyncClient(base_url=plane.base_url, headers=headers, timeout=30) as client:
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                due = started + published / rate
                await asyncio.sleep(max(0.0, due - time.perf_counter()))
                sent = time.perf_counter()
                answer = await client.post("/api/v1/queues/active/messages",
                                           json={"messages": [{"value": repr(time.time())} for _ in range(per_request)]})
                publish_ms.append((time.perf_counter() - sent) * 1000)
                if answer.status_code != 200:
                    raise SystemExit(f"publish failed: {answer.status_code} {answer.text}")
                published += per_request
        elapsed = time.perf_counter() - started
        after = [_cpu_s(pid) for pid in brokers], _cpu_s(plane.server.pid)
        deadline = time.monotonic() + 15
        while count and sum(got) < published and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*readers, return_exceptions=True)
        await close_all(sockets)
        if not count:  # nobody took them: drain the queue for the next count
            async with httpx.AsyncClient(base_url=plane.base_url, headers=headers, timeout=30) as client:
                while True:
                    answer = await client.post("/api/v1/queues/active/groups/active/receive",
                                               json={"max_messages": 1000, "wait_seconds": 1})
                    messages = answer.json()["messages"]
                    if not messages:
                        break
                    await client.post("/api/v1/queues/active/groups/active/ack",
                                      json={"receipts": [m["receipt"] for m in messages]})
        pct = lambda values, q: round(statistics.quantiles(values, n=100)[q - 1], 1) if len(values) > 1 else None  # noqa: E731
        return {"published": published, "delivered": sum(got) if count else None,
                "subscribers_without_messages": sum(1 for n in got if n == 0), "throttle_frames": throttles[0],
                "publish_ms_p50": pct(publish_ms, 50), "publish_ms_p99": pct(publish_ms, 99),
                "push_ms_p50": pct(push_ms, 50), "push_ms_p99": pct(push_ms, 99),
                **_cpu_percents(before, after, elapsed)}

    return _for_each(counts, lambda count: f"{count:,} WebSocket subscribers while {rate:,} msgs/s are published "
                                           f"for {seconds:.0f} s", measure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--curves", default=",".join(CURVES), help="which curves, comma-separated (default %(default)s)")
    parser.add_argument("--queues", type=int, default=1_000, help="queues the tenant creates (default %(default)s)")
    parser.add_argument("--subscribers", default="0,10,100", help="idle subscriber counts (default %(default)s)")
    parser.add_argument("--groups", default="1,10,100", help="queue and stream group counts (default %(default)s)")
    parser.add_argument("--active", default="0,10,100,1000", help="active subscriber counts (default %(default)s)")
    args = parser.parse_args()
    curves = set(args.curves.split(","))
    if curves - set(CURVES):
        parser.error(f"unknown curves: {', '.join(sorted(curves - set(CURVES)))} (known: {', '.join(CURVES)})")
    result: dict = {"bench": "scale", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}}
    if "partitions" in curves:
        result["partitions_per_broker"] = partitions_curve()
    if "groups" in curves:
        result["groups_per_broker"] = groups_curve([int(c) for c in args.groups.split(",")])
    if curves & {"queues", "subscribers", "active"}:
        with tempfile.TemporaryDirectory(prefix="tideway-bench-scale-") as home:
            progress("starting Redis, controller, 3 brokers, a Celery worker and the gateway")
            with running_control_plane(Path(home), f"sqlite://{home}/control.sqlite3") as plane:
                if "subscribers" in curves:
                    counts = [int(c) for c in args.subscribers.split(",")]
                    result["idle_subscribers"] = subscribers_curve(plane, counts)
                if "active" in curves:
                    result["active_subscribers"] = active_subscribers_curve(plane, [int(c) for c in args.active.split(",")])
                if "queues" in curves:
                    progress(f"one tenant creates {args.queues:,} queues")
                    result["queues_per_tenant"] = queues_curve(plane, args.queues)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
