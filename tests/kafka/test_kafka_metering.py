"""Kafka traffic is metered as native traffic is (issue 42): what a tenant produced and read through the Kafka
listener appears in ``__usage`` exactly, to the message and to the byte the brokers' own counters saw."""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Producer

from tests.harness.gateway import make_queue
from tests.harness.processes import OPERATOR_KEY
from tests.harness.waiting import eventually
from tests.kafka.clients import confluent_config
from tests.kafka.test_kafka_clients import _consume_confluent
from tests.usage_records import read_usage, totals
from tideway.native import TidewayClient
from tideway.native.traffic import describe_traffic

pytestmark = pytest.mark.timeout(300)


def test_kafka_traffic_is_metered_to_the_message_and_byte(plane, tenant_a):
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=2, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    producer = Producer(confluent_config(bootstrap, key, **{"linger.ms": 20}))
    for i in range(60):
        producer.produce(name, value=b"v" * (20 + i), key=b"k%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    assert len(_consume_confluent(bootstrap, key, name, 2, 60)) == 60

    async def metered() -> tuple[dict, list]:
        async with TidewayClient(plane.deployment.bootstrap, api_key=OPERATOR_KEY) as client:
            topic = next(t for t in await client.list_topics() if t.endswith(f".{name}"))
            counters = (await describe_traffic(client, [topic])).topics[topic]

            async def flushed() -> dict | None:
                got = totals(await read_usage(client), topic)
                return got if got["messages_in"] >= 60 and got["messages_out"] >= 60 else None

            return await eventually(flushed, 30, "the brokers' usage of the Kafka traffic", interval_s=0.5), counters

    got, counters = asyncio.run(metered())
    assert got == {"messages_in": 60, "bytes_in": counters[1], "messages_out": 60, "bytes_out": counters[3]}
    assert counters[0] == 60 and counters[2] == 60
