"""The Kafka listener beside the native protocol, in one sitting, on one broker process (issue 42).

Starts ``tideway broker`` with a Kafka listener, then for each protocol, one after the other on topics of their own:

* produce 100 B and 1 KiB messages, batched (acks=1, linger 5 ms): Tideway's async Producer, then confluent-kafka's
  Producer (librdkafka) through the Kafka listener;
* consume them back from the earliest offset: Tideway's Consumer, then confluent-kafka's Consumer by assignment;
* end-to-end latency at 1,000 msgs/s (the producer in this process, the consumer in this process too, each message
  carrying its send time).

Each phase reports msgs/s and the whole machine's CPU seconds per million messages; the summary gives each Kafka
figure as a ratio of the native one (issue 42's targets: produce and consume at least 0.8, latency p99 at most
1.2). Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/kafka.py            # about two minutes
    .venv/bin/python bench/kafka.py --quick    # under a minute
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from bench.broker import consume_phase, latency_phase, produce_phase, start_broker  # noqa: E402
from bench.common import OPERATOR_KEY, CpuMeter, free_port, progress, settle, wait_port  # noqa: E402
from tideway.native import TidewayClient  # noqa: E402


def _kafka_config(bootstrap: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap, "security.protocol": "SASL_PLAINTEXT", "sasl.mechanisms": "PLAIN",
            "sasl.username": "bench", "sasl.password": OPERATOR_KEY, **extra}


def kafka_produce(bootstrap: str, topic: str, count: int, size: int) -> dict:
    from confluent_kafka import Producer

    value = os.urandom(size)
    producer = Producer(_kafka_config(bootstrap, **{"acks": 1, "linger.ms": 5, "batch.size": 512 << 10,
                                                    "queue.buffering.max.messages": 1_000_000,
                                                    "enable.idempotence": False}))
    with CpuMeter() as meter:
        for i in range(count):
            while True:
                try:
                    producer.produce(topic, value, partition=0)
                    break
                except BufferError:
                    producer.poll(0.01)
            if i % 10_000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0
    return {"messages": count, "seconds": round(meter.seconds, 3), "msgs_per_s": round(count / meter.seconds),
            "mb_per_s": round(count * size / meter.seconds / 1e6, 1), "cpu_s_per_million": meter.cpu_s_per_million(count)}


def kafka_consume(bootstrap: str, topic: str, count: int, size: int) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    # librdkafka stops fetching for fetch.queue.backoff.ms (1 s) once queued.min.messages (100,000) wait in its
    # queue: with 100 B messages that is every 10 MB, and the phase would measure the back-off.
    consumer = Consumer(_kafka_config(bootstrap, **{"group.id": "bench", "enable.auto.commit": False,
                                                    "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 8 << 20,
                                                    "queued.min.messages": 2_000_000, "fetch.queue.backoff.ms": 10}))
    consumer.assign([TopicPartition(topic, 0, 0)])
    seen = 0
    with CpuMeter() as meter:
        while seen < count:
            seen += len(consumer.consume(10_000, 5.0))
    consumer.close()
    return {"messages": seen, "seconds": round(meter.seconds, 3), "msgs_per_s": round(seen / meter.seconds),
            "mb_per_s": round(seen * size / meter.seconds / 1e6, 1), "cpu_s_per_million": meter.cpu_s_per_million(seen)}


def kafka_latency(bootstrap: str, topic: str, rate: int, seconds: float) -> dict:
    from confluent_kafka import Consumer, Producer, TopicPartition

    consumer = Consumer(_kafka_config(bootstrap, **{"group.id": "bench-latency", "enable.auto.commit": False,
                                                    "fetch.wait.max.ms": 500, "fetch.min.bytes": 1}))
    consumer.assign([TopicPartition(topic, 0, -1)])  # the end: only what is sent from now on
    total = int(rate * seconds)
    latencies_us: list[float] = []

    def receive() -> None:
        deadline = time.monotonic() + seconds + 30
        while len(latencies_us) < total and time.monotonic() < deadline:
            message = consumer.poll(0.5)  # (consume(n, timeout) would wait to fill n)
            if message is not None and message.error() is None:
                (sent,) = struct.unpack_from(">q", message.value())
                latencies_us.append((time.perf_counter_ns() - sent) / 1000)

    receiver = threading.Thread(target=receive, daemon=True)
    receiver.start()
    time.sleep(1.0)  # the consumer has its assignment and waits at the end
    producer = Producer(_kafka_config(bootstrap, **{"acks": 1, "linger.ms": 0, "enable.idempotence": False}))
    padding = b"." * 92
    started = time.perf_counter()
    for i in range(total):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.produce(topic, struct.pack(">q", time.perf_counter_ns()) + padding, partition=0)
        producer.poll(0)
    producer.flush(30)
    receiver.join(seconds + 30)
    consumer.close()
    latencies_us.sort()

    def pct(p: float) -> float:
        return round(latencies_us[min(len(latencies_us) - 1, int(p * len(latencies_us)))] / 1000, 3)

    return {"rate_msgs_per_s": rate, "messages": len(latencies_us), "p50_ms": pct(0.50), "p99_ms": pct(0.99),
            "max_ms": pct(1.0)}


async def create_topics(bootstrap: str, names: list[str]) -> None:
    async with TidewayClient(bootstrap) as client:
        for name in names:
            await client.create_topic(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller counts and a shorter latency phase")
    args = parser.parse_args()
    small = 200_000 if args.quick else 500_000
    large = 50_000 if args.quick else 100_000
    seconds = 5 if args.quick else 10
    port, kafka_port = free_port(), free_port()
    native_bootstrap, kafka_bootstrap = f"127.0.0.1:{port}", f"127.0.0.1:{kafka_port}"
    results: dict = {"native": {}, "kafka": {}}
    with tempfile.TemporaryDirectory(prefix="tideway-bench-") as data_dir:
        broker = start_broker(data_dir, port, ("--kafka-listen", kafka_bootstrap))
        try:
            wait_port(kafka_port)
            # Named as a tenant's topics are (t<id>.<queue>), so the broker meters them as it would a tenant's.
            names = [f"t1.{proto}-{what}" for proto in ("native", "kafka") for what in ("small", "large", "latency")]
            asyncio.run(create_topics(native_bootstrap, names))

            def measure(protocol: str, phase: str, what: str, run, *args) -> None:
                settle()
                progress(f"{protocol}: {what}")
                results[protocol][phase] = run(*args)

            for label, size, count in (("100B", 100, small), ("1KiB", 1024, large)):
                which = "small" if size == 100 else "large"
                native_topic, kafka_topic = f"t1.native-{which}", f"t1.kafka-{which}"
                measure("native", f"produce_{label}", f"produce {count:,} x {label}",
                        asyncio.run, produce_phase(native_bootstrap, native_topic, count, size))
                measure("kafka", f"produce_{label}", f"produce {count:,} x {label}",
                        kafka_produce, kafka_bootstrap, kafka_topic, count, size)
                measure("native", f"consume_{label}", f"consume {count:,} x {label}",
                        asyncio.run, consume_phase(native_bootstrap, native_topic, count, size))
                measure("kafka", f"consume_{label}", f"consume {count:,} x {label}",
                        kafka_consume, kafka_bootstrap, kafka_topic, count, size)
            what = f"latency at 1,000 msgs/s for {seconds} s"
            measure("native", "latency", what, asyncio.run, latency_phase(native_bootstrap, "t1.native-latency", 1000, seconds))
            measure("kafka", "latency", what, kafka_latency, kafka_bootstrap, "t1.kafka-latency", 1000, seconds)
        finally:
            broker.terminate()
            broker.wait(30)
    native, kafka = results["native"], results["kafka"]
    ratios = {phase: round(kafka[phase]["msgs_per_s"] / native[phase]["msgs_per_s"], 2)
              for phase in native if phase != "latency"}
    ratios["latency_p50"] = round(kafka["latency"]["p50_ms"] / native["latency"]["p50_ms"], 2)
    ratios["latency_p99"] = round(kafka["latency"]["p99_ms"] / native["latency"]["p99_ms"], 2)
    print(json.dumps({
        "benchmark": "kafka",
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "clients": "native: tideway.native async Producer/Consumer; kafka: confluent-kafka (librdkafka) through the "
                   "Kafka listener; both acks=1, linger 5 ms, one partition, same host, SASL/PLAIN with the operator key",
        "targets": "kafka / native: produce and consume >= 0.8; latency p99 <= 1.2",
        "kafka_over_native": ratios,
        **results,
    }, indent=2))


if __name__ == "__main__":
    main()
