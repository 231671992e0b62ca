"""Benchmark metering and billing: the usage job over many usage events, and traffic to the usage API.

1. **Job time**: writes ``--events`` usage events (default 10,000,000; ``--quick`` 1,000,000) to a real
   broker's ``__usage`` topic, as records of 200 events each (``--events-per-record``; half ingress ranges, half egress figures, over
   100 tenants with 10 queues each, a tenth of the records sent twice), then times the usage job's Spark
   part (read through the ``tideway`` source, decode, deduplicate, drop contained ranges, hourly rollup)
   on ``--master`` (default ``local[2]``). Target: under 60 s for 10,000,000 events.
2. **Traffic to the API**: a tenant sends messages, the broker meters them (a flush a second), the job
   runs (the same code as the Celery task, against a control-plane database of its own) and
   ``GET /api/v1/usage``'s code shows them: the time from the last message to its appearance, without
   the schedule's wait. With the default schedule (every 240 s) the worst case adds 240 s.

The metering cost on the produce path is measured by ``bench/broker.py --usage-interval-ms 0`` against
the default (docs/benchmarks.md). Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/billing.py            # 10,000,000 events
    .venv/bin/python bench/billing.py --quick    # 1,000,000 events
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT)]

from bench.broker import start_broker  # noqa: E402
from bench.common import CpuMeter, free_port, progress  # noqa: E402

EVENTS_PER_RECORD = 200


async def write_usage(bootstrap: str, events: int, per_record: int = EVENTS_PER_RECORD) -> int:
    """Usage records of ``per_record`` events (half ingress, half egress) holding ``events`` events in all (plus a
    tenth sent twice); returns the records written."""
    from tideway_server.brokers.usage_topic import USAGE_PARTITIONS, USAGE_SETTINGS, USAGE_TOPIC

    from tideway.native import Producer, TidewayClient

    async with TidewayClient(bootstrap) as client:
        await client.create_topic(USAGE_TOPIC, partitions=USAGE_PARTITIONS, configs=USAGE_SETTINGS)
    records = events // per_record
    half = per_record // 2
    at = int(time.time() * 1000)
    written = 0
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=1 << 20) as producer:
        for n in range(records):
            ingress = [[f"t{(n + i) % 100}.q{i % 10}", i % 4, n * 10, n * 10 + 10, 10, 1000] for i in range(half)]
            egress = [[f"t{(n + i) % 100}.q{i % 10}", 7, 700] for i in range(half)]
            value = json.dumps({"id": f"bench:1:{n}", "source": "bench", "at_ms": at + n, "ingress": ingress,
                                "egress": egress, "requests": [], "storage": []}, separators=(",", ":")).encode()
            copies = 2 if n % 10 == 0 else 1
            for _ in range(copies):
                await producer.send(USAGE_TOPIC, value, key=b"bench")
                written += 1
        await producer.flush()
    return written


def job_phase(master: str, events: int, per_record: int) -> dict:
    from tideway_server.spark_analytics.session import spark_session
    from tideway_server.spark_analytics.usage import HOUR_MS, usage_rollup

    data_dir = tempfile.mkdtemp(prefix="tideway-bench-billing-")
    port = free_port()
    broker = start_broker(data_dir, port, ("--usage-interval-ms", "0"))
    bootstrap = f"127.0.0.1:{port}"
    try:
        progress(f"writing {events:,} usage events to __usage")
        started = time.perf_counter()
        records = asyncio.run(write_usage(bootstrap, events, per_record))
        write_s = time.perf_counter() - started
        progress(f"{records:,} records in {write_s:.1f}s; starting Spark ({master})")
        started = time.perf_counter()
        spark = spark_session(master, app="bench-billing")
        session_s = time.perf_counter() - started
        with CpuMeter() as meter:  # the machine's CPU: Spark's JVM and Python workers, and the broker
            raw = spark.read.format("tideway").option("bootstrap", bootstrap).option("subscribe", "__usage") \
                .option("minPartitions", str(2 * spark.sparkContext.defaultParallelism)).load()  # as the job reads
            rows = usage_rollup(raw, 0, 2**62 // HOUR_MS * HOUR_MS).collect()
        job_s = meter.seconds
        total_in = sum(r.value for r in rows if r.metric == "messages_in")
        progress(f"job over {events:,} events: {job_s:.1f}s -> {len(rows):,} rollup rows")
        return {"events": events, "events_per_record": per_record, "records_written": records,
                "duplicates": records - events // per_record,
                "write_s": round(write_s, 1), "spark_session_s": round(session_s, 1), "job_s": round(job_s, 1),
                "events_per_s": round(events / job_s), "rollup_rows": len(rows),
                "records_per_s": round(records / job_s), "cpu_s_per_million_events": meter.cpu_s_per_million(events),
                "messages_in_counted": total_in, "messages_in_expected": events // per_record * (per_record // 2) * 10,
                "target_s": 60}
    finally:
        broker.terminate()
        broker.wait(30)


def api_phase(master: str) -> dict:
    home = tempfile.mkdtemp(prefix="tideway-bench-billing-home-")
    os.environ["TIDEWAY_HOME"] = home
    os.environ.pop("DATABASE_URL", None)
    from tideway_server.cli.django_setup import setup_django

    setup_django(migrate=True)
    from tideway_server.billing.usage import usage
    from tideway_server.billing.usage_job import run_usage_billing
    from tideway_server.tenants.actions import do_signup

    from tideway.native import Producer

    _user, tenant = do_signup(username="bench", password="a long bench password", email="b@example.com", tenant_name="Bench")
    data_dir = tempfile.mkdtemp(prefix="tideway-bench-billing-api-")
    port = free_port()
    broker = start_broker(data_dir, port)
    bootstrap = f"127.0.0.1:{port}"
    topic = f"t{tenant.id}.orders"
    try:
        async def send() -> None:
            from tideway.native import TidewayClient

            async with TidewayClient(bootstrap) as client:
                await client.create_topic(topic, partitions=2)
            async with Producer(bootstrap, acks="all") as producer:
                for i in range(1000):
                    await producer.send(topic, b"x" * 100, partition=i % 2)

        asyncio.run(send())
        sent_at = time.perf_counter()
        period = time.strftime("%Y-%m", time.gmtime())
        attempts = 0
        while True:  # the broker flushes once a second; the job then has to run after that flush
            attempts += 1
            run_usage_billing(period, master=master, bootstrap=bootstrap, progress=lambda line: None)
            shown = usage(tenant, start=None, end=None)["totals"].get("messages_in", 0)
            if shown >= 1000 or attempts >= 10:
                break
            time.sleep(1)
        seen_s = time.perf_counter() - sent_at
        return {"messages": 1000, "shown": shown, "job_runs": attempts, "traffic_to_api_s": round(seen_s, 1),
                "default_schedule_s": 240, "worst_case_with_schedule_s": round(seen_s + 240, 1), "target_s": 300}
    finally:
        broker.terminate()
        broker.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 events instead of 10,000,000")
    parser.add_argument("--events", type=int, default=None, help="usage events for the job phase")
    parser.add_argument("--events-per-record", type=int, default=EVENTS_PER_RECORD,
                        help="usage events per record (default %(default)s; a broker's record a second holds one or "
                             "two per partition it leads)")
    parser.add_argument("--skip-api", action="store_true", help="only the job phase")
    parser.add_argument("--master", default="local[2]", help="Spark master (default %(default)s)")
    args = parser.parse_args()
    events = args.events or (1_000_000 if args.quick else 10_000_000)
    job = job_phase(args.master, events, args.events_per_record)
    api = None if args.skip_api else api_phase(args.master)
    print(json.dumps({"benchmark": "billing", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                      "job": job, "traffic_to_api": api}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
