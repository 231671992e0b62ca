"""TLS on every broker listener and the controller (issues 14 and 42): `--certfile --keyfile --cafile`, as
`tideway serve`.

A controller and two brokers, every port with TLS: the controller pushes
cluster state over TLS, the follower replicates over the leader's internal
listener with TLS, and a client with the CA produces and consumes; a client
speaking plain TCP to a TLS port gets nowhere. The Kafka listener takes
librdkafka with `security.protocol=SASL_SSL` (docs/kafka.md), and refuses it
in plain text.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import KafkaException
from confluent_kafka import Producer as KafkaProducer

from tests.harness.processes import (
    OPERATOR_KEY,
    BrokerProcess,
    ControllerProcess,
    self_signed_certificate,
)
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.conn import tls_context
from tideway.protocol import errors


def test_a_cluster_with_tls_on_every_port_replicates_and_serves(tmp_path):
    cert, key = self_signed_certificate(tmp_path)
    tls = ["--certfile", cert, "--keyfile", key, "--cafile", cert]
    controller = ControllerProcess(tmp_path, "controller", database_url=f"sqlite://{tmp_path}/control.sqlite3",
                                   extra_args=["--lease-ms", "2000", "--broker-session-timeout-ms", "2000", *tls]).start()
    brokers = {}
    try:
        for i in (1, 2):
            brokers[i] = BrokerProcess(tmp_path / f"broker-{i}", broker_id=i, kafka=True,
                                       extra_args=["--controller", controller.address, *tls]).start()
        bootstrap = ",".join(b.bootstrap for b in brokers.values())
        context = tls_context(cert)

        async def run() -> list[bytes]:
            async with TidewayClient(bootstrap, ssl_context=context) as client:
                for _ in range(100):  # until both brokers registered
                    try:
                        await client.create_topic("secure", partitions=1, replication_factor=2)
                        break
                    except errors.TidewayError:
                        await asyncio.sleep(0.2)
                async with Producer(client, acks="all") as producer:
                    for i in range(50):
                        await producer.send("secure", b"sealed %d" % i)
                    await producer.flush()
                consumer = Consumer(client)
                await consumer.start()
                await consumer.assign([("secure", 0)], start="earliest")
                values: list[bytes] = []
                while len(values) < 50:
                    batch = await consumer.getmany(timeout_ms=5000)
                    assert batch, f"only {len(values)} of 50 arrived"
                    values += [r.value for records in batch.values() for r in records]
                await consumer.stop()
                return values

        # acks=all was answered, so the follower holds all 50 too: copied over TLS from the leader's internal listener.
        assert asyncio.run(run()) == [b"sealed %d" % i for i in range(50)]

        async def plain() -> None:
            async with TidewayClient(bootstrap, metadata_timeout_ms=2000) as client:
                await client.list_topics()

        with pytest.raises(errors.TidewayError):
            asyncio.run(plain())

        # The Kafka listener: librdkafka over SASL_SSL with the CA reads what the native client wrote, and writes.
        kafka_bootstrap = ",".join(b.kafka_bootstrap for b in brokers.values())
        sealed = {"bootstrap.servers": kafka_bootstrap, "security.protocol": "SASL_SSL", "ssl.ca.location": cert,
                  "sasl.mechanisms": "PLAIN", "sasl.username": "operator", "sasl.password": OPERATOR_KEY}
        producer = KafkaProducer(sealed)
        producer.produce("secure", value=b"sealed by kafka")
        assert producer.flush(30) == 0
        consumer = KafkaConsumer({**sealed, "group.id": "tls-readers", "auto.offset.reset": "earliest"})
        consumer.subscribe(["secure"])
        read: list[bytes] = []
        try:
            while len(read) < 51:
                message = consumer.poll(30)
                assert message is not None, f"only {len(read)} of 51 arrived over SASL_SSL"
                if message.error() is None:
                    read.append(message.value())
        finally:
            consumer.close()
        assert read == [b"sealed %d" % i for i in range(50)] + [b"sealed by kafka"]
        in_clear = KafkaConsumer({**sealed, "security.protocol": "SASL_PLAINTEXT", "group.id": "clear"})
        with pytest.raises(KafkaException):
            in_clear.list_topics(timeout=5)
        in_clear.close()
    finally:
        for broker in brokers.values():
            broker.kill()
        controller.kill()
