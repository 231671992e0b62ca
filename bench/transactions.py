"""Transactions beside idempotent produce, in one sitting, on one broker process (issue 44).

Starts ``tideway broker`` (one broker, which is its own transaction coordinator), then, each on a topic of its own:

* idempotent produce (acks=all) of 100 B messages with Tideway's async Producer;
* transactional produce of the same with TransactionalProducer, 100 and then 1,000 messages per transaction
  (begin, send, commit: each commit waits for its markers' decision to be written);
* both again with four producers in one process, each on a partition of its own (a transactional id is one
  sequence of transactions, each commit a wait of a few round trips: an application that needs more runs several,
  as Kafka Streams runs one per thread, and the others send meanwhile);
* end-to-end latency for a read_committed Consumer at 1,000 msgs/s, messages sent in transactions of 10 (the
  record is readable once its transaction's commit marker is replicated), beside the same rate without
  transactions.

Each throughput phase reports msgs/s and the whole machine's CPU seconds per million messages; the summary gives the
transactional figures as ratios of the idempotent one (issue 44's target: at least 0.7 at 1,000 per transaction).
Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/transactions.py            # about a minute
    .venv/bin/python bench/transactions.py --quick    # under half a minute
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import platform
import struct
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.broker import latency_phase, start_broker  # noqa: E402
from bench.common import CpuMeter, free_port, progress, settle  # noqa: E402
from tideway.native import Consumer, Producer, TidewayClient, TransactionalProducer  # noqa: E402

PRODUCERS = 4  # the phases with several producers in one process (a partition each)


async def idempotent_phase(bootstrap: str, topic: str, count: int, size: int, producers: int = 1) -> dict:
    """``producers`` Producers in this process, each writing ``count / producers`` records to a partition of its own."""
    value = os.urandom(size)

    async def one(partition: int) -> None:
        async with Producer(bootstrap, acks="all", linger_ms=5, batch_size_bytes=512 << 10) as producer:
            send = producer.send
            for _ in range(0, count // producers, 1000):
                for _ in range(1000):
                    await send(topic, value, partition=partition)
                await asyncio.sleep(0)  # (the others' turn: one producer's loop of sends never waits)
            await producer.flush()

    with CpuMeter() as meter:
        await asyncio.gather(*(one(p) for p in range(producers)))
    return {**_figures(count, size, meter), "producers": producers}


async def transactional_phase(bootstrap: str, topic: str, count: int, size: int, per_transaction: int,
                              producers: int = 1) -> dict:
    """As idempotent_phase, each producer with a transactional id of its own: begin, ``per_transaction`` sends,
    commit, and again."""
    value = os.urandom(size)

    async def one(partition: int) -> None:
        async with TransactionalProducer(bootstrap, f"bench-{per_transaction}-{partition}", linger_ms=5,
                                         batch_size_bytes=512 << 10) as producer:
            send = producer.send
            for _ in range(0, count // producers, per_transaction):
                producer.begin()
                for _ in range(per_transaction):
                    await send(topic, value, partition=partition)
                await producer.commit()

    with CpuMeter() as meter:
        await asyncio.gather(*(one(p) for p in range(producers)))
    return {**_figures(count, size, meter), "producers": producers, "messages_per_transaction": per_transaction,
            "transactions_per_s": round(count / per_transaction / meter.seconds, 1)}


def _figures(count: int, size: int, meter: CpuMeter) -> dict:
    return {"messages": count, "seconds": round(meter.seconds, 3), "msgs_per_s": round(count / meter.seconds),
            "mb_per_s": round(count * size / meter.seconds / 1e6, 1), "cpu_s_per_million": meter.cpu_s_per_million(count)}


async def committed_latency_phase(bootstrap: str, topic: str, rate: int, seconds: float, per_transaction: int) -> dict:
    """Send time to read_committed receipt, for messages sent at ``rate`` in transactions of ``per_transaction``."""
    gc.collect()
    gc.freeze()
    consumer = Consumer(bootstrap, fetch_max_wait_ms=500, isolation_level="read_committed")
    await consumer.start()
    await consumer.assign([(topic, 0)], start="latest")
    latencies_us: list[float] = []
    total = int(rate * seconds)

    async def receive() -> None:
        while len(latencies_us) < total:
            for records in (await consumer.getmany(timeout_ms=1000)).values():
                now = time.perf_counter_ns()
                for record in records:
                    (sent,) = struct.unpack_from(">q", record.value)
                    latencies_us.append((now - sent) / 1000)

    receiver = asyncio.ensure_future(receive())
    await asyncio.sleep(0.2)
    padding = b"." * 92
    async with TransactionalProducer(bootstrap, "bench-latency", linger_ms=0) as producer:
        started = time.perf_counter()
        with CpuMeter() as meter:
            for first in range(0, total, per_transaction):
                producer.begin()
                for i in range(first, min(first + per_transaction, total)):
                    delay = started + i / rate - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    await producer.send(topic, struct.pack(">q", time.perf_counter_ns()) + padding, partition=0)
                await producer.commit()
            await asyncio.wait_for(receiver, seconds + 30)
    await consumer.stop()
    gc.unfreeze()
    latencies_us.sort()

    def pct(p: float) -> float:
        return round(latencies_us[min(len(latencies_us) - 1, int(p * len(latencies_us)))] / 1000, 3)

    return {"rate_msgs_per_s": rate, "messages_per_transaction": per_transaction, "messages": len(latencies_us),
            "p50_ms": pct(0.50), "p99_ms": pct(0.99), "max_ms": pct(1.0),
            "cpu_s_per_million": meter.cpu_s_per_million(total)}


async def create_topics(bootstrap: str, names: dict[str, int]) -> None:
    async with TidewayClient(bootstrap) as client:
        for name, partitions in names.items():
            await client.create_topic(name, partitions=partitions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts and a shorter latency phase")
    args = parser.parse_args()
    count = 100_000 if args.quick else 300_000
    seconds = 5 if args.quick else 10
    port = free_port()
    bootstrap = f"127.0.0.1:{port}"
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="tideway-bench-") as data_dir:
        broker = start_broker(data_dir, port)
        try:
            names = {"t1.idempotent": 1, "t1.txn-100": 1, "t1.txn-1000": 1, "t1.idempotent-many": PRODUCERS,
                     "t1.txn-many": PRODUCERS, "t1.latency-plain": 1, "t1.latency-txn": 1}
            asyncio.run(create_topics(bootstrap, names))

            def measure(phase: str, what: str, coroutine) -> None:
                settle()
                progress(what)
                results[phase] = asyncio.run(coroutine)

            measure("idempotent", f"idempotent produce {count:,} x 100 B",
                    idempotent_phase(bootstrap, "t1.idempotent", count, 100))
            for per in (100, 1000):
                measure(f"transactional_{per}", f"transactional produce {count:,} x 100 B, {per} per transaction",
                        transactional_phase(bootstrap, f"t1.txn-{per}", count, 100, per))
            measure(f"idempotent_{PRODUCERS}_producers", f"idempotent produce {count:,} x 100 B, {PRODUCERS} producers",
                    idempotent_phase(bootstrap, "t1.idempotent-many", count, 100, PRODUCERS))
            measure(f"transactional_1000_{PRODUCERS}_producers",
                    f"transactional produce {count:,} x 100 B, 1000 per transaction, {PRODUCERS} producers",
                    transactional_phase(bootstrap, "t1.txn-many", count, 100, 1000, PRODUCERS))
            measure("latency_plain", f"latency at 1,000 msgs/s for {seconds} s, no transactions",
                    latency_phase(bootstrap, "t1.latency-plain", 1000, seconds))
            measure("latency_read_committed", f"latency at 1,000 msgs/s for {seconds} s, transactions of 10",
                    committed_latency_phase(bootstrap, "t1.latency-txn", 1000, seconds, 10))
        finally:
            broker.terminate()
            broker.wait(30)
    idempotent = results["idempotent"]["msgs_per_s"]
    print(json.dumps({
        "benchmark": "transactions",
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "clients": "tideway.native Producer (acks=all, idempotent) and TransactionalProducer, linger 5 ms, one "
                   f"producer on one partition, or {PRODUCERS} in one process on a partition each; one broker (its "
                   "own transaction coordinator), same host",
        "targets": "transactional / idempotent throughput >= 0.7 at 1,000 messages per transaction",
        "transactional_over_idempotent": {
            **{f"per_{per}": round(results[f"transactional_{per}"]["msgs_per_s"] / idempotent, 2) for per in (100, 1000)},
            f"per_1000_{PRODUCERS}_producers": round(
                results[f"transactional_1000_{PRODUCERS}_producers"]["msgs_per_s"]
                / results[f"idempotent_{PRODUCERS}_producers"]["msgs_per_s"], 2)},
        **results,
    }, indent=2))


if __name__ == "__main__":
    main()
