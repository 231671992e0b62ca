"""Benchmark the consumption models on one real broker process (100-byte messages).

* queue mode: 4 worker processes receive (up to 100 a call, ``--receive-max``) and accept every
  message of a 4-partition queue; accepts/s from the moment every worker is connected (its
  process started and its client has the cluster's metadata: starting processes is not
  consuming; the first receive, which finds the group's coordinator, counts) to the last accept
  (the others are then in a receive's long poll with nothing left to get, up to 500 ms that used
  to count as accepting: it cut the figure by a third). Each worker freezes what it inherited from this
  process (``gc.freeze()``, as a service does after start-up). With
  ``--ack per-message`` (the default) each message is accepted on its own, as
  a handler that finishes it would (``await queue.ack([message])``, the
  batch's handlers running concurrently); ``--ack batch`` accepts a received
  batch in one call. Every acquisition and every accept is state written to
  ``__consumer_offsets`` before the answer.
* stream mode: one group member reads the whole topic and commits after every
  batch; msgs/s.

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/consume.py            # 200,000 messages
    .venv/bin/python bench/consume.py --quick    # 40,000 messages
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.broker import start_broker  # noqa: E402
from bench.common import CpuMeter, free_port, progress  # noqa: E402
from tideway.native import Producer, TidewayClient  # noqa: E402
from tideway.native.group import GroupConsumer  # noqa: E402
from tideway.native.queue import QueueConsumer  # noqa: E402

PARTITIONS = 4
SIZE = 100


async def fill(bootstrap: str, topic: str, count: int) -> None:
    value = os.urandom(SIZE)
    async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=512 << 10) as producer:
        for i in range(count):
            await producer.send(topic, value, partition=i % PARTITIONS)
        await producer.flush()


def queue_worker(bootstrap: str, topic: str, accepted, finished, stop_at: int, ack: str, receive_max: int, connected) -> None:
    # As a worker service does after start-up (and the brokers, the gateway and bench/peers.py's latency
    # consumer do): what exists now lives as long as the process, out of the collector's full passes.
    # Forked from this benchmark, a worker would otherwise scan the parent's whole heap in each of them
    # (12% of the phase's CPU).
    gc.freeze()

    async def run() -> None:
        async with QueueConsumer(bootstrap, "bench-workers", topic) as queue:
            connected.wait(60)  # every worker and the clock start together (blocking: nothing else runs yet)
            idle = 0
            while idle < 3 and accepted.value < stop_at:
                messages = await queue.receive(receive_max, wait_ms=500)
                if not messages:
                    idle += 1
                    continue
                idle = 0
                if ack == "batch":
                    await queue.ack(messages)
                else:
                    await asyncio.gather(*(queue.ack([message]) for message in messages))
                with accepted.get_lock():
                    accepted.value += len(messages)
                    if accepted.value >= stop_at and not finished.value:
                        finished.value = time.perf_counter()  # CLOCK_MONOTONIC: one clock for every process

    asyncio.run(run())


def queue_phase(bootstrap: str, topic: str, count: int, workers: int, ack: str = "per-message", receive_max: int = 100) -> dict:
    context = multiprocessing.get_context("fork")
    accepted = context.Value("q", 0)
    finished = context.Value("d", 0.0)
    connected = context.Barrier(workers + 1)
    processes = [
        context.Process(target=queue_worker, args=(bootstrap, topic, accepted, finished, count, ack, receive_max, connected))
        for _ in range(workers)
    ]
    for process in processes:
        process.start()
    connected.wait(60)
    with CpuMeter() as meter:
        for process in processes:
            process.join()
    # The rate runs to the last accept, not to the workers' exit: the others are then in a receive's
    # long poll (up to 500 ms) with nothing left to get, which is not accepting slower.
    seconds = finished.value - meter.started if finished.value else meter.seconds
    return {"workers": workers, "ack": ack, "receive_max": receive_max, "messages": accepted.value, "seconds": round(seconds, 2),
            "accepts_per_s": round(accepted.value / seconds), "cpu_s_per_million": meter.cpu_s_per_million(accepted.value)}


async def stream_phase(bootstrap: str, topic: str, count: int) -> dict:
    member = GroupConsumer(bootstrap, "bench-stream", [topic], auto_offset_reset="earliest", enable_auto_commit=False)
    await member.start()
    got = 0
    with CpuMeter() as meter:
        while got < count:
            batch = await member.getmany(1000)
            got += sum(len(records) for records in batch.values())
            if batch:
                await member.commit()
    await member.stop()
    return {"members": 1, "messages": got, "seconds": round(meter.seconds, 2), "msgs_per_s": round(got / meter.seconds),
            "commit": "after every batch", "cpu_s_per_million": meter.cpu_s_per_million(got)}


async def prepare(bootstrap: str, count: int) -> None:
    async with TidewayClient(bootstrap) as client:
        for topic in ("bench-queue", "bench-stream"):
            await client.create_topic(topic, partitions=PARTITIONS)
    progress(f"publishing {count:,} x {SIZE} B to each topic")
    await fill(bootstrap, "bench-queue", count)
    await fill(bootstrap, "bench-stream", count)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="40,000 messages instead of 200,000")
    parser.add_argument("--workers", type=int, default=4, help="queue worker processes (default %(default)s)")
    parser.add_argument("--ack", choices=("per-message", "batch"), default="per-message",
                        help="queue mode: accept each message on its own (default) or each received batch in one call")
    parser.add_argument("--receive-max", type=int, default=100, help="queue mode: messages a receive asks for (default %(default)s)")
    args = parser.parse_args()
    count = 40_000 if args.quick else 200_000
    with tempfile.TemporaryDirectory(prefix="tideway-bench-") as data:
        port = free_port()
        broker = start_broker(data, port)
        bootstrap = f"127.0.0.1:{port}"
        try:
            asyncio.run(prepare(bootstrap, count))
            progress(f"queue mode: {args.workers} workers accept {count:,} messages ({args.ack})")
            queue = queue_phase(bootstrap, "bench-queue", count, args.workers, args.ack, args.receive_max)
            progress(f"stream mode: one group member reads {count:,} messages")
            stream = asyncio.run(stream_phase(bootstrap, "bench-stream", count))
        finally:
            broker.terminate()
            broker.wait(30)
    print(json.dumps({
        "bench": "consume", "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "message_bytes": SIZE, "partitions": PARTITIONS, "queue": queue, "stream": stream,
    }, indent=2))


if __name__ == "__main__":
    main()
