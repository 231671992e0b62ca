"""An idempotent acks=all Kafka producer (librdkafka) writes through leader kills on the Kafka listeners (issue 42).

A controller and three brokers, each with a Kafka listener; a topic of three partitions on three replicas
(min.insync.replicas 2). Three rounds: SIGKILL the broker leading a partition while confluent-kafka writes with
``enable.idempotence``, restart it. Every message is acknowledged (none fails back to the application); read back
by a Kafka consumer, nothing acknowledged is missing, nothing is there twice, each partition is in send order.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from tests.fault.test_idempotent_failover import (
    PARTITIONS,
    TOPIC,
    create_replicated_topic,
    kill_leaders,
)
from tests.harness.processes import OPERATOR_KEY
from tests.kafka.clients import confluent_config

# One database: the subject is the data plane; the controller's store on both databases is
# tests/fault/test_cluster_failover.py's.
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


ROUNDS = 3


class KafkaLoad(threading.Thread):
    """About 300 messages a second over the partitions, each delivery's outcome recorded."""

    def __init__(self, bootstrap: str, key: str = OPERATOR_KEY, topic: str = TOPIC) -> None:
        super().__init__(daemon=True)
        self.producer = Producer(confluent_config(bootstrap, key, **{
            "enable.idempotence": True, "acks": "all", "linger.ms": 5, "message.timeout.ms": 120_000}))
        self.topic = topic
        self.acked: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.failures: list = []
        self.fatal: Exception | None = None  # a fatal error of the producer (it stopped producing then)
        self.stop = threading.Event()

    def _delivered(self, error, message) -> None:
        if error is not None:
            self.failures.append(error)
        else:
            self.acked[message.partition()].append(message.value())

    def run(self) -> None:
        sequence = 0
        try:
            while not self.stop.is_set():
                for _ in range(3):
                    partition = sequence % PARTITIONS
                    self.producer.produce(self.topic, value=b"p%d-%09d" % (partition, sequence), partition=partition,
                                          on_delivery=self._delivered)
                    sequence += 1
                self.producer.poll(0.01)
            self.producer.flush(120)
        except KafkaException as exc:  # librdkafka's fatal errors (idempotence lost): the producer is unusable
            self.fatal = exc
            print(f"KafkaLoad: the producer failed fatally: {exc}", flush=True)
        finally:
            # Its threads end now, not at interpreter exit: left to the collector, a producer outlived its test and
            # kept reconnecting to the addresses of stopped brokers (hosts a later test reused).
            self.producer.close()
            self.producer = None


def _read_back(bootstrap: str, expected: int) -> dict[int, list[bytes]]:
    consumer = Consumer(confluent_config(bootstrap, OPERATOR_KEY, **{"group.id": "checker", "enable.auto.commit": False}))
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    total, quiet, deadline = 0, 0, time.monotonic() + 60
    while time.monotonic() < deadline and (total < expected or quiet < 3):
        messages = consumer.consume(1000, 0.5)
        quiet = 0 if messages else quiet + 1
        for message in messages:
            assert message.error() is None, message.error()
            out[message.partition()].append(message.value())
            total += 1
    consumer.close()
    return out


async def test_an_idempotent_kafka_producer_writes_through_three_leader_kills(deployment_factory):
    deployment = deployment_factory(brokers=3, session_timeout_ms=2000, kafka=True)
    await create_replicated_topic(deployment)
    bootstrap = deployment.kafka_bootstrap
    load = KafkaLoad(bootstrap)
    load.start()
    await asyncio.sleep(1)
    await kill_leaders(deployment, ROUNDS)
    load.stop.set()
    await asyncio.to_thread(load.join, 150)

    assert not load.is_alive(), "the producer did not finish its deliveries"
    assert load.failures == [], f"{len(load.failures)} deliveries failed, e.g. {load.failures[:3]}"
    acknowledged = sum(len(v) for v in load.acked.values())
    assert acknowledged > ROUNDS * 5 * 250
    stored = await asyncio.to_thread(_read_back, bootstrap, acknowledged)
    for partition, values in load.acked.items():
        data = stored[partition]
        assert len(data) == len(set(data)), f"partition {partition} holds duplicates"
        assert data == sorted(data), f"partition {partition} is out of send order"
        assert set(values) <= set(data), f"partition {partition} lost {len(set(values) - set(data))} acknowledged records"
