"""Tideway beside its peers, in one sitting: one table of figures and ratios.

Runs, twice each (``--reps``) and one system at a time on this machine:

* what a wake-up costs here (``bench/wakeup.py``, a few seconds): on a slow
  host every hop of a message costs more, for every system;
* the peer harness (``--harness DIR``: a checkout of the team's peer
  benchmarks, the directory holding ``servers.sh``, ``bench_redis.py``,
  ``bench_nats.py`` and ``raw_limits.py`` with their ``.venv``): the disk's
  fsync latency, Redis Streams (AOF, fsync every second) and NATS JetStream
  (file storage), each on a port of its own (``--redis-port``,
  ``--nats-port``) so running servers are left alone;
* Tideway, one broker process (authentication on, as deployed): batched
  produce of 100 B and 1 KiB messages, stream consumption committing after
  every batch, queue mode (4 worker processes receiving up to 1,000 at a time,
  as the peers read, each message accepted on its own), end-to-end latency at 1,000 msgs/s with the consumer in another
  process (as the harness measures the peers), and one request's round trip
  (the floor under every latency); then a broker whose topics
  fsync before every acknowledgement (``flush: always``): batched produce and
  latency;
* the data gateway (``bench/gateway.py --phases rest,latency``): REST publish
  and publish-to-push latency.

Every figure is the median of the runs. CPU is the whole machine's busy CPU
per million messages (client, servers and kernel share the 2 cores). Before
every latency phase, whichever the system, the disk's write-back of the phases
before it is taken at once (``sync``) and the machine left to go quiet
(``bench.common.settle``), as the peer harness's own ``run_all.sh`` waits for an
idle machine before each measurement.

Prints the table (markdown) on stdout and writes every run's figures as JSON
lines to ``--out``; progress goes to stderr. About 12 minutes with two reps.

    .venv/bin/python bench/peers.py --harness ~/peers
    .venv/bin/python bench/peers.py --skip-peers          # Tideway's side only
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.broker import disk_fsyncs_per_s, produce_phase, start_broker  # noqa: E402
from bench.common import CpuMeter, free_port, progress, settle  # noqa: E402
from bench.consume import fill, queue_phase, stream_phase  # noqa: E402
from bench.wakeup import measure as measure_wakeups  # noqa: E402
from tideway.native import Consumer, Producer, TidewayClient  # noqa: E402
from tideway.protocol import messages as m  # noqa: E402

STAMP = struct.Struct(">q")  # the publisher's time.monotonic_ns(), shared by every process on the host


# -- Tideway --------------------------------------------------------------------------------------


def _latency_consumer(bootstrap: str, topic: str, expected: int, ready, pipe) -> None:
    async def run() -> list[int]:
        consumer = Consumer(bootstrap, fetch_max_wait_ms=500)
        await consumer.start()
        await consumer.assign([(topic, 0)], start="latest")
        await consumer.getmany(timeout_ms=50)  # the first fetch has placed the position
        ready.set()
        latencies: list[int] = []
        deadline = time.monotonic() + 60
        while len(latencies) < expected and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                now = time.monotonic_ns()
                latencies.extend(now - STAMP.unpack_from(record.value)[0] for record in records)
        await consumer.stop()
        return latencies

    try:
        import gc

        gc.collect()
        gc.freeze()  # as a latency-sensitive service does after start-up
        pipe.send(("ok", asyncio.run(run())))
    except BaseException as exc:  # tell the parent rather than leave it waiting
        pipe.send(("error", repr(exc)))


async def _paced_publish(bootstrap: str, topic: str, rate: int, seconds: float, size: int) -> tuple[int, float, list[int]]:
    """Send ``rate`` messages a second, never waiting for an acknowledgement before the next send.

    Returns how many were sent, how late the publisher ever was (ms) and how
    long each send took to be acknowledged (ns): the first stage of a
    message's way (client send, broker receive, append, answer).
    """
    total = int(rate * seconds)
    padding = b"x" * (size - STAMP.size)
    late_ns = 0
    acknowledged: list[int] = []
    async with Producer(bootstrap, acks=1, linger_ms=0) as producer:
        started = time.monotonic_ns() + 20_000_000
        for i in range(total):
            due = started + i * 1_000_000_000 // rate
            now = time.monotonic_ns()
            if due > now:
                await asyncio.sleep((due - now) / 1e9)
            else:
                late_ns = max(late_ns, now - due)
            sent_ns = time.monotonic_ns()
            record = await producer.send(topic, STAMP.pack(sent_ns) + padding)
            record.add_done_callback(lambda sent_ns=sent_ns: acknowledged.append(time.monotonic_ns() - sent_ns))
        await producer.flush()
    return total, late_ns / 1e6, acknowledged


def latency_phase(bootstrap: str, topic: str, *, rate: int = 1000, seconds: float = 10, size: int = 100) -> dict:
    """End-to-end latency, the consumer in a forked process (the harness's method for the peers)."""
    context = multiprocessing.get_context("fork")
    ready = context.Event()
    receive_end, send_end = context.Pipe(duplex=False)
    expected = int(rate * seconds)
    consumer = context.Process(target=_latency_consumer, args=(bootstrap, topic, expected, ready, send_end))
    consumer.start()
    if not ready.wait(30):
        consumer.kill()
        raise SystemExit("the latency consumer did not start")
    with CpuMeter() as meter:
        sent, late_ms, acknowledged = asyncio.run(_paced_publish(bootstrap, topic, rate, seconds, size))
        status, latencies = receive_end.recv() if receive_end.poll(90) else ("error", "no answer")
    consumer.join(10)
    if status != "ok":
        raise SystemExit(f"the latency consumer failed: {latencies}")
    ordered, acks = sorted(latencies), sorted(acknowledged)

    def pct(values: list[int], p: float) -> float:
        return round(values[min(len(values) - 1, int(p * len(values)))] / 1e6, 3)

    return {"rate": rate, "sent": sent, "received": len(ordered), "p50_ms": pct(ordered, 0.5), "p99_ms": pct(ordered, 0.99),
            "p999_ms": pct(ordered, 0.999), "max_ms": pct(ordered, 1.0),
            # The first stage alone: send -> acknowledged (the rest is the fetch's wake-up and the delivery).
            "acknowledged_p50_ms": pct(acks, 0.5), "acknowledged_p99_ms": pct(acks, 0.99),
            "max_publisher_late_ms": round(late_ms, 3), "cpu_s_per_million": meter.cpu_s_per_million(sent)}


async def round_trip_phase(bootstrap: str, count: int = 2000) -> dict:
    """One request the broker answers at once (API_VERSIONS), paced as the latency phase is: the floor under
    every acknowledgement and delivery (two processes waking, a loopback round trip, Python at both ends)."""
    async with TidewayClient(bootstrap) as client:
        connection = await client.connection(next(iter(client.brokers)))
        took: list[int] = []
        for _ in range(count):
            started = time.monotonic_ns()
            await connection.request(m.ApiKey.API_VERSIONS, m.ApiVersionsRequest())
            took.append(time.monotonic_ns() - started)
            await asyncio.sleep(0.001)
    took.sort()
    return {"requests": count, "p50_ms": round(took[count // 2] / 1e6, 3), "p99_ms": round(took[int(count * 0.99)] / 1e6, 3)}


def tideway_broker(reps_dir: str, flush: str) -> dict:
    """One broker's figures: everything for ``flush: none``, produce and latency for ``flush: always``."""
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="tideway-peers-", dir=reps_dir) as data:
        if flush == "always":
            out["disk_fsyncs_per_s"] = disk_fsyncs_per_s(data)
        broker = start_broker(data, port)
        try:
            configs = {"flush": flush}

            async def create(names: list[str], partitions: int = 1) -> None:
                async with TidewayClient(bootstrap) as client:
                    for name in names:
                        await client.create_topic(name, partitions=partitions, configs=configs)

            asyncio.run(create(["t1.p100", "t1.p1k", "t1.latency"]))
            progress(f"tideway (flush {flush}): produce 200,000 x 100 B")
            out["produce_100B"] = asyncio.run(produce_phase(bootstrap, "t1.p100", 200_000, 100))
            if flush == "none":
                progress("tideway: produce 50,000 x 1 KiB")
                out["produce_1KiB"] = asyncio.run(produce_phase(bootstrap, "t1.p1k", 50_000, 1024))
                asyncio.run(create(["bench-queue", "bench-stream"], partitions=4))
                progress("tideway: filling a queue and a stream topic (200,000 x 100 B, 4 partitions each)")
                asyncio.run(fill(bootstrap, "bench-queue", 200_000))
                asyncio.run(fill(bootstrap, "bench-stream", 200_000))
                progress("tideway: stream consume, commit after every batch")
                out["stream_consume"] = asyncio.run(stream_phase(bootstrap, "bench-stream", 200_000))
                progress("tideway: queue mode, 4 workers, receives of up to 1,000, each message accepted on its own")
                # Up to 1,000 a receive, as the peers read (XREADGROUP COUNT 1000, fetch(1000), prefetch 1000).
                out["queue_per_message"] = queue_phase(bootstrap, "bench-queue", 200_000, 4, "per-message", receive_max=1000)
            settle()
            progress(f"tideway (flush {flush}): latency at 1,000 msgs/s for 10 s")
            out["latency"] = latency_phase(bootstrap, "t1.latency")
            if flush == "none":
                progress("tideway: one request's round trip (API_VERSIONS), 2,000 times")
                out["round_trip"] = asyncio.run(round_trip_phase(bootstrap))
        finally:
            broker.terminate()
            broker.wait(30)
    return out


def tideway_gateway() -> dict:
    progress("tideway gateway: REST publish and publish-to-push latency (bench/gateway.py --phases rest,latency)")
    answer = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "gateway.py"), "--phases", "rest,latency", "--seconds", "10"],
                            cwd=REPO_ROOT, stdout=subprocess.PIPE, check=True, timeout=600)
    return json.loads(answer.stdout)


# -- the peers, through their harness -------------------------------------------------------------


class Harness:
    def __init__(self, directory: Path, redis_port: int, nats_port: int) -> None:
        self.directory = directory
        self.python = str(directory / ".venv" / "bin" / "python")
        self.env = {**os.environ, "PEER_REDIS_PORT": str(redis_port), "PEER_NATS_PORT": str(nats_port),
                    "PEERS_DATA": tempfile.mkdtemp(prefix="tideway-peers-data-")}
        for needed in ("servers.sh", "bench_redis.py", "bench_nats.py", "raw_limits.py"):
            if not (directory / needed).exists():
                raise SystemExit(f"{directory} holds no {needed}: --harness names the peer harness's directory")
        if not Path(self.python).exists():
            raise SystemExit(f"{self.python} is missing: set up the harness's .venv first (its README says how)")

    def servers(self, *args: str) -> str:
        return subprocess.run(["bash", "servers.sh", *args], cwd=self.directory, env=self.env, check=True,
                              stdout=subprocess.PIPE, text=True, timeout=180).stdout.strip()

    def run(self, script: str, *args: str) -> list[dict]:
        answer = subprocess.run([self.python, script, *args], cwd=self.directory, env=self.env, stdout=subprocess.PIPE,
                                text=True, timeout=400)
        if answer.returncode:
            raise SystemExit(f"{script} {' '.join(args)} failed ({answer.returncode})")
        return [json.loads(line) for line in answer.stdout.splitlines() if line.startswith("{")]

    def fsync(self) -> dict:
        return self.run("raw_limits.py", "fsync", "--n", "1000")[0]

    def peer(self, name: str) -> dict:
        server, script = {"redis": ("redis-aof", "bench_redis.py"), "nats": ("nats", "bench_nats.py")}[name]
        self.servers("start", server)
        try:
            pid = self.servers("pid", name)
            publish = ["--variant", "aof-everysec", "--batch", "100"] if name == "redis" else ["--publish", "async", "--window", "1000"]
            progress(f"{name}: produce and consume 200,000 x 100 B")
            small = self.run(script, "throughput", *publish, "--size", "100", "--count", "200000", "--server-pid", pid)
            progress(f"{name}: produce and consume 20,000 x 1 KiB")
            large = self.run(script, "throughput", *publish, "--size", "1024", "--count", "20000", "--server-pid", pid)
            settle()
            progress(f"{name}: latency at 1,000 msgs/s for 10 s")
            latency = self.run(script, "latency", "--rate", "1000", "--seconds", "10", "--deadline", "60", "--server-pid", pid)[0]
        finally:
            self.servers("stop", "redis" if name == "redis" else name)

        def scenario(lines: list[dict], which: str) -> dict:
            line = next(record for record in lines if record["scenario"] == which)
            cpu = sum(line.get(k) or 0 for k in ("client_cpu_s", "server_cpu_s", "other_cpu_s"))
            return {"msgs_per_s": line["msgs_per_s"], "cpu_s_per_million": round(cpu / line["msgs"] * 1e6, 2)}

        return {"produce_100B": scenario(small, "produce"), "consume_100B": scenario(small, "consume"),
                "produce_1KiB": scenario(large, "produce"),
                "latency": {"p50_ms": latency["p50_ms"], "p99_ms": latency["p99_ms"], "max_ms": latency["max_ms"]}}


# -- the table ------------------------------------------------------------------------------------


def median(runs: list[dict], *path: str) -> float | None:
    values = []
    for run in runs:
        value = run
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value is not None:
            values.append(value)
    return round(statistics.median(values), 3) if values else None


def table(runs: dict[str, list[dict]]) -> str:
    redis, nats, tide = runs.get("redis", []), runs.get("nats", []), runs.get("tideway", [])
    always, gateway, disk = runs.get("tideway_always", []), runs.get("gateway", []), runs.get("fsync", [])
    wakeups = runs.get("wakeup", [])

    def fmt(value, digits=0) -> str:
        if value is None:
            return "—"
        return f"{value:,.{digits}f}"

    def rate_row(label: str, redis_path, nats_path, tide_runs, tide_path) -> str:
        r, n, t = median(redis, *redis_path) if redis_path else None, median(nats, *nats_path) if nats_path else None, median(tide_runs, *tide_path)
        best = max([v for v in (r, n) if v is not None], default=None)
        cpu = median(tide_runs, *tide_path[:-1], "cpu_s_per_million")
        peer_cpu = [median(runs_, *path[:-1], "cpu_s_per_million") for runs_, path in ((redis, redis_path), (nats, nats_path)) if path]
        ratio = f"{t / best:.2f}×" if best and t else "—"
        return (f"| {label} | {fmt(r)} | {fmt(n)} | {fmt(t)} | {ratio} | "
                f"{' / '.join(fmt(c, 1) for c in peer_cpu) or '—'} | {fmt(cpu, 1)} |")

    def latency_row(label: str, tide_runs) -> str:
        cells = []
        for runs_ in (redis, nats, tide_runs):
            p50, p99 = median(runs_, "latency", "p50_ms"), median(runs_, "latency", "p99_ms")
            cells.append(f"{fmt(p50, 2)} / {fmt(p99, 2)}" if p50 is not None else "—")
        best50 = min([v for v in (median(redis, "latency", "p50_ms"), median(nats, "latency", "p50_ms")) if v is not None], default=None)
        best99 = min([v for v in (median(redis, "latency", "p99_ms"), median(nats, "latency", "p99_ms")) if v is not None], default=None)
        t50, t99 = median(tide_runs, "latency", "p50_ms"), median(tide_runs, "latency", "p99_ms")
        ratio = f"{t50 / best50:.2f}× / {t99 / best99:.2f}×" if best50 and best99 and t50 and t99 else "—"
        return f"| {label} | {' | '.join(cells)} | {ratio} | | |"

    lines = [
        "| scenario | Redis Streams (AOF everysec) | NATS JetStream (file) | Tideway | Tideway / best peer | peers' CPU s per 1M | Tideway's CPU s per 1M |",
        "|---|---|---|---|---|---|---|",
        rate_row("produce 100 B, batched (msgs/s)", ("produce_100B", "msgs_per_s"), ("produce_100B", "msgs_per_s"), tide, ("produce_100B", "msgs_per_s")),
        rate_row("produce 1 KiB, batched (msgs/s)", ("produce_1KiB", "msgs_per_s"), ("produce_1KiB", "msgs_per_s"), tide, ("produce_1KiB", "msgs_per_s")),
        rate_row("stream consume, commit per batch (msgs/s)", ("consume_100B", "msgs_per_s"), ("consume_100B", "msgs_per_s"), tide,
                 ("stream_consume", "msgs_per_s")),
        rate_row("queue mode, 4 workers, per-message accept (msgs/s)", ("consume_100B", "msgs_per_s"), ("consume_100B", "msgs_per_s"), tide,
                 ("queue_per_message", "accepts_per_s")),
        latency_row("end-to-end latency at 1,000 msgs/s, p50 / p99 (ms)", tide),
        f"| one request's round trip, client to broker, p50 / p99 (ms) | | | {fmt(median(tide, 'round_trip', 'p50_ms'), 3)} / "
        f"{fmt(median(tide, 'round_trip', 'p99_ms'), 3)} | the floor under Tideway's latency | | |",
    ]
    if always:
        none_rate, always_rate = median(tide, "produce_100B", "msgs_per_s"), median(always, "produce_100B", "msgs_per_s")
        lines.append(f"| flush: always, produce 100 B (msgs/s) | | | {fmt(always_rate)} | "
                     f"{always_rate / none_rate:.2f} of flush: none | | {fmt(median(always, 'produce_100B', 'cpu_s_per_million'), 1)} |"
                     if none_rate and always_rate else "| flush: always, produce 100 B | | | — | | | |")
        lines.append(latency_row("flush: always, latency at 1,000 msgs/s, p50 / p99 (ms)", always))
    if gateway:
        rest = median(gateway, "rest_publish", "msgs_per_s")
        native = median(tide, "produce_100B", "msgs_per_s")
        share = f"{rest / native:.0%} of native produce" if rest and native else "—"
        lines.append(f"| gateway REST publish, 8 clients, batches of 100 (msgs/s) | | | {fmt(rest)} | {share} | | "
                     f"{fmt(median(gateway, 'rest_publish', 'cpu_s_per_million'), 1)} |")
        lines.append(f"| gateway publish-to-push at 1,000 msgs/s, p50 / p99 (ms) | | | {fmt(median(gateway, 'latency', 'p50_ms'), 2)} / "
                     f"{fmt(median(gateway, 'latency', 'p99_ms'), 2)} | target p99 ≤ 10 ms | | |")
    if disk:
        lines.append(f"\nThe disk: 4 KiB write + fsync median {fmt(median(disk, 'median_us') / 1000, 2)} ms, "
                     f"p99 {fmt(median(disk, 'p99_us') / 1000, 2)} ms (the harness's raw_limits.py).")
    if wakeups:
        def gap(ms: int, field: str) -> float | None:
            values = [g[field] for run in wakeups for g in run["gaps"] if g["gap_ms"] == ms]
            return statistics.median(values) if values else None

        lines.append(f"The host: a round trip between two Python processes costs the one that slept {fmt(gap(4, 'parent_cpu_us'), 0)} µs "
                     f"of CPU after 4 ms asleep, {fmt(gap(0, 'parent_cpu_us'), 0)} µs back to back (bench/wakeup.py; "
                     "the larger the first, the more every hop of a message at 1,000 msgs/s costs).")
    lines.append(f"Medians of {max(len(v) for v in runs.values())} runs each, measured {time.strftime('%Y-%m-%d %H:%M')}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--harness", type=Path, default=os.environ.get("TIDEWAY_PEERS_HARNESS"),
                        help="the peer harness's directory (or TIDEWAY_PEERS_HARNESS)")
    parser.add_argument("--reps", type=int, default=2, help="runs of every system (default %(default)s); medians are reported")
    parser.add_argument("--redis-port", type=int, default=16379, help="the harness's Redis port (default %(default)s)")
    parser.add_argument("--nats-port", type=int, default=14222, help="the harness's NATS port (default %(default)s)")
    parser.add_argument("--skip-peers", action="store_true", help="measure Tideway only")
    parser.add_argument("--skip-gateway", action="store_true", help="leave out the gateway (its deployment takes a minute to start)")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / f"tideway-peers-{time.strftime('%Y%m%d-%H%M%S')}.jsonl",
                        help="every run's figures, one JSON line each (default: a new file in the temporary directory)")
    args = parser.parse_args()
    if not args.skip_peers and not args.harness:
        parser.error("--harness DIR is needed (or --skip-peers)")
    harness = None if args.skip_peers else Harness(args.harness.expanduser().resolve(), args.redis_port, args.nats_port)
    runs: dict[str, list[dict]] = {}

    def keep(kind: str, figures: dict) -> None:
        runs.setdefault(kind, []).append(figures)
        with args.out.open("a") as out:
            out.write(json.dumps({"system": kind, "at": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}) + "\n")

    progress(f"{args.reps} runs of each; every run's figures go to {args.out}")
    for rep in range(1, args.reps + 1):
        progress(f"-- run {rep} of {args.reps}")
        keep("wakeup", {"gaps": measure_wakeups()})
        if harness:
            settle()
            keep("fsync", harness.fsync())
            keep("redis", harness.peer("redis"))
            keep("nats", harness.peer("nats"))
        keep("tideway", tideway_broker(tempfile.gettempdir(), "none"))
        keep("tideway_always", tideway_broker(tempfile.gettempdir(), "always"))
        if not args.skip_gateway:
            keep("gateway", tideway_gateway())
    print(table(runs))


if __name__ == "__main__":
    main()
