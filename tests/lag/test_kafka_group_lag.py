"""A Kafka consumer group's lag is looked at like any group's (issue 42): librdkafka's group commits through the
Kafka listener, and the monitoring worker's looks (every second) report its lag in messages, per partition, from
those commits, on the same endpoint as a Tideway group's."""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, Producer

from tests.harness.gateway import make_queue
from tests.harness.waiting import wait_until
from tests.kafka.clients import confluent_config

pytestmark = pytest.mark.timeout(300)


def test_a_kafka_groups_commits_are_its_lag(plane):
    _slug, key = plane.create_tenant(plan="team")
    name = make_queue(plane, key, partitions=2, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    producer = Producer(confluent_config(bootstrap, key))
    for i in range(100):
        producer.produce(name, value=b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0

    # The group reads 30 of each partition's 50 and commits: 40 messages behind.
    group = plane.unique("kafka-lagging")
    consumer = Consumer(confluent_config(bootstrap, key, **{"group.id": group, "auto.offset.reset": "earliest",
                                                            "enable.auto.commit": False}))
    consumer.subscribe([name])
    taken: dict[int, int] = {0: 0, 1: 0}
    try:
        def read_thirty_each() -> bool:
            for message in consumer.consume(10, 1):
                if message.error() is None and taken[message.partition()] < 30:
                    taken[message.partition()] += 1
                    consumer.commit(message=message, asynchronous=False)
            return taken == {0: 30, 1: 30}
        wait_until(read_thirty_each, 60, "30 messages of each partition read and committed", interval_s=0)
    finally:
        consumer.close()

    def live_lag():
        with plane.client(key) as api:
            answer = api.get(f"/api/v1/queues/{name}/groups/{group}/lag")
        live = answer.json().get("live") if answer.status_code == 200 else None
        return live if live is not None and live["lag"] == 40 else None

    live = wait_until(live_lag, 60, "the monitoring worker's look to show the Kafka group 40 behind", interval_s=1)
    assert {p["partition"]: p["lag"] for p in live["partitions"]} == {0: 20, 1: 20}
