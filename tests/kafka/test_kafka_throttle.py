"""A tenant's plan rates on the Kafka listener (issue 42): past its publish or consume bytes per second on a broker,
its answers carry Kafka's ``throttle_time_ms`` and the broker reads nothing more from that connection for as long
(KIP-219), so librdkafka reports throttling and the tenant's rate stays near its plan's; nothing is lost, and
another tenant on the same broker is not held back.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer

from tests.harness.gateway import make_queue
from tests.harness.waiting import wait_until
from tests.kafka.clients import confluent_config

pytestmark = pytest.mark.timeout(300)

MIB = 1 << 20
MESSAGES = 4096  # 1 KiB each: 4 MiB, four times the free plan's publish rate (1 MiB/s), twice its consume (2 MiB/s)


def _produce(bootstrap: str, key: str, queue: str, throttles: list) -> tuple[float, int]:
    """(seconds it took, messages acknowledged) for MESSAGES of 1 KiB, sent as fast as the client may."""
    delivered = []
    # batch.size within the queue's max.message.bytes (the free plan's 256 KiB), as with Kafka's brokers
    producer = Producer(confluent_config(bootstrap, key, **{"linger.ms": 5, "batch.size": 128 * 1024,
                                                           "throttle_cb": throttles.append}))
    started = time.monotonic()
    for i in range(MESSAGES):
        while True:
            try:
                producer.produce(queue, value=bytes(1024), key=b"%d" % i, partition=0,
                                 on_delivery=lambda err, msg: delivered.append(err))
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(120) == 0
    return time.monotonic() - started, sum(1 for err in delivered if err is None)


def test_a_tenant_past_its_plan_rate_is_throttled_and_loses_nothing(plane):
    bootstrap = plane.deployment.kafka_bootstrap
    _slug, free_key = plane.create_tenant(plan="free")
    _slug, team_key = plane.create_tenant(plan="team")  # 20 MiB/s
    free_queue = make_queue(plane, free_key, partitions=1, mode="stream")
    team_queue = make_queue(plane, team_key, partitions=1, mode="stream")

    throttled: list = []
    took, acknowledged = _produce(bootstrap, free_key, free_queue, throttled)
    assert acknowledged == MESSAGES
    # (librdkafka also reports the end of a throttle, as a time of 0)
    assert any(event.throttle_time > 0 for event in throttled)
    # 4 MiB at 1 MiB/s, the first second's worth at once: about 3 s (never under 2 however fast the machine).
    assert took >= 2.0, f"4 MiB went through in {took:.1f} s at a plan rate of 1 MiB/s"

    not_throttled: list = []
    _took, acknowledged = _produce(bootstrap, team_key, team_queue, not_throttled)
    assert acknowledged == MESSAGES and not any(event.throttle_time > 0 for event in not_throttled)

    # Reading: 4 MiB at 2 MiB/s is throttled too, and every message arrives.
    read_throttled: list = []
    consumer = Consumer(confluent_config(bootstrap, free_key, **{
        "group.id": plane.unique("throttled"), "auto.offset.reset": "earliest", "throttle_cb": read_throttled.append,
        "fetch.max.bytes": MIB, "max.partition.fetch.bytes": MIB}))
    consumer.subscribe([free_queue])
    read = 0
    try:
        def all_read() -> bool:
            nonlocal read
            for message in consumer.consume(500, 1):
                if message.error() is None:
                    read += 1
            return read >= MESSAGES
        wait_until(all_read, 120, f"the {MESSAGES} messages to be read", interval_s=0)
    finally:
        consumer.close()
    assert read == MESSAGES
    assert any(event.throttle_time > 0 for event in read_throttled)
