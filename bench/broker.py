"""Benchmark one real broker process: throughput and end-to-end latency.

Starts ``tideway broker`` in a temporary directory on a free loopback port,
then measures with the async client in this process:

* produce msgs/s and MB/s (acks=1, batched) for 100-byte and 1 KiB messages;
* consume msgs/s and MB/s of the same data, read back from the earliest offset;
* end-to-end latency p50/p99 (send -> consumer sees it) at a fixed rate.

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/broker.py            # full run (about a minute)
    .venv/bin/python bench/broker.py --quick    # under 30 s
    .venv/bin/python bench/broker.py --flush always   # topics that fsync before every acknowledgement
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.common import CpuMeter, free_port, progress, wait_port  # noqa: E402
from tideway.native import Consumer, Producer, TidewayClient  # noqa: E402


def start_broker(data_dir: str, port: int, extra_args: tuple[str, ...] = (), log_file=None) -> subprocess.Popen:
    """A broker process; its log goes to ``log_file`` (an open file) if given, else to this process's stderr."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tideway_server.cli.main", "--log-level", "WARNING", "broker", "--data", data_dir,
         "--listen", f"127.0.0.1:{port}", "--internal-listen", "127.0.0.1:0", "--metrics-listen", "off", *extra_args],
        cwd=REPO_ROOT, stdout=log_file, stderr=None if log_file is None else subprocess.STDOUT,
    )
    try:
        wait_port(port, timeout_s=20)
    except SystemExit:
        process.kill()
        raise
    return process


async def produce_phase(bootstrap: str, topic: str, count: int, size: int) -> dict:
    value = os.urandom(size)
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=512 << 10) as producer:
        with CpuMeter() as meter:
            send = producer.send
            for _ in range(count):
                await send(topic, value)
            await producer.flush()
    return {"messages": count, "seconds": round(meter.seconds, 3), "msgs_per_s": round(count / meter.seconds),
            "mb_per_s": round(count * size / meter.seconds / 1e6, 1), "cpu_s_per_million": meter.cpu_s_per_million(count)}


async def consume_phase(bootstrap: str, topic: str, count: int, size: int) -> dict:
    consumer = Consumer(bootstrap, partition_fetch_bytes_max=8 << 20)
    await consumer.start()
    await consumer.assign([(topic, 0)], start="earliest")
    seen = 0
    with CpuMeter() as meter:
        while seen < count:
            for records in (await consumer.getmany(timeout_ms=5000)).values():
                seen += len(records)
    await consumer.stop()
    return {"messages": seen, "seconds": round(meter.seconds, 3), "msgs_per_s": round(seen / meter.seconds),
            "mb_per_s": round(seen * size / meter.seconds / 1e6, 1), "cpu_s_per_million": meter.cpu_s_per_million(seen)}


async def latency_phase(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    # What a latency-sensitive application does after start-up: keep long-lived
    # objects out of the cyclic collector so its full passes stay short. The
    # collector stays on.
    gc.collect()
    gc.freeze()
    consumer = Consumer(bootstrap, fetch_max_wait_ms=500)
    await consumer.start()
    await consumer.assign([(topic, 0)], start="latest")
    latencies_us: list[float] = []
    total = int(rate * seconds)
    done = asyncio.Event()

    async def receive() -> None:
        while len(latencies_us) < total:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                now = time.perf_counter_ns()
                for record in records:
                    (sent,) = struct.unpack_from(">q", record.value)
                    latencies_us.append((now - sent) / 1000)
        done.set()

    receiver = asyncio.ensure_future(receive())
    await asyncio.sleep(0.2)
    padding = b"." * 92
    async with Producer(bootstrap, acks=1, linger_ms=0) as producer:
        started = time.perf_counter()
        for i in range(total):
            target = started + i / rate
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await producer.send(topic, struct.pack(">q", time.perf_counter_ns()) + padding)
        await producer.flush()
    await asyncio.wait_for(done.wait(), 30)
    receiver.cancel()
    await consumer.stop()
    latencies_us.sort()

    def pct(p: float) -> float:
        return round(latencies_us[min(len(latencies_us) - 1, int(p * len(latencies_us)))] / 1000, 3)

    return {"rate_msgs_per_s": rate, "messages": len(latencies_us), "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0)}


# Named as a tenant's topics are (t<id>.<queue>), so the broker meters them as it would a tenant's.
SMALL, LARGE, LATENCY = "t1.small", "t1.large", "t1.latency"


async def run(args: argparse.Namespace, bootstrap: str) -> dict:
    configs = {"flush": args.flush} if args.flush else {}
    async with TidewayClient(bootstrap) as client:
        for name in (SMALL, LARGE, LATENCY):
            await client.create_topic(name, configs=configs)
    small_count = 200_000 if args.quick else 1_000_000
    large_count = 50_000 if args.quick else 200_000
    results: dict = {}
    progress(f"produce {small_count} x 100 B")
    results["produce_100B"] = await produce_phase(bootstrap, SMALL, small_count, 100)
    progress(f"consume {small_count} x 100 B")
    results["consume_100B"] = await consume_phase(bootstrap, SMALL, small_count, 100)
    progress(f"produce {large_count} x 1 KiB")
    results["produce_1KiB"] = await produce_phase(bootstrap, LARGE, large_count, 1024)
    progress(f"consume {large_count} x 1 KiB")
    results["consume_1KiB"] = await consume_phase(bootstrap, LARGE, large_count, 1024)
    seconds = 5 if args.quick else 15
    progress(f"latency at 1000 msgs/s for {seconds}s")
    results["latency_100B_at_1000_per_s"] = await latency_phase(bootstrap, LATENCY, 1000, seconds)
    return results


def disk_fsyncs_per_s(directory: str, seconds: float = 1.0) -> int:
    """How many 4 KiB append + fsync rounds the disk under ``directory`` does per second (one writer)."""
    path = os.path.join(directory, "fsync-probe")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    block = b"x" * 4096
    count = 0
    started = time.perf_counter()
    try:
        while time.perf_counter() - started < seconds:
            os.write(fd, block)
            os.fsync(fd)
            count += 1
    finally:
        os.close(fd)
        os.unlink(path)
    return round(count / (time.perf_counter() - started))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts, finishes in under 30 s")
    parser.add_argument("--flush", help="the topics' fsync policy: always (before every acknowledgement), none, or MS "
                        "(every MS milliseconds); default: the broker's (none); the disk's own fsync rate is reported too")
    parser.add_argument("--usage-interval-ms", type=int, default=None,
                        help="the broker's metering interval (0: metering off); default: the broker's (1000)")
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="tideway-bench-") as data_dir:
        fsyncs_per_s = disk_fsyncs_per_s(data_dir) if args.flush else None
        extra = ("--usage-interval-ms", str(args.usage_interval_ms)) if args.usage_interval_ms is not None else ()
        broker = start_broker(data_dir, port, extra)
        try:
            try:
                import uvloop

                results = uvloop.run(run(args, f"127.0.0.1:{port}"))
            except ImportError:
                results = asyncio.run(run(args, f"127.0.0.1:{port}"))
        finally:
            broker.terminate()
            broker.wait(30)
    output = {
        "benchmark": "broker",
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "client": "tideway.native async Producer/Consumer (acks=1, linger 5 ms, 512 KiB batches), same host",
        "latency_client": "producer (linger 0) and long-polling consumer in this process; gc.freeze() before the phase",
        "flush": args.flush or "none (the broker's default)",
        "usage_interval_ms": args.usage_interval_ms if args.usage_interval_ms is not None else 1000,
        **({"disk_fsyncs_per_s": fsyncs_per_s} if fsyncs_per_s is not None else {}),
        **results,
    }
    print(json.dumps(output, indent=2))


if __name__ == "__main__":
    main()
