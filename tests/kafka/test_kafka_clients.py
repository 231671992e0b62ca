"""Unmodified Kafka clients against the Kafka listeners of a real 3-broker deployment, with tenants' API keys.

librdkafka (confluent-kafka), kafka-python and aiokafka produce and consume a tenant's queue by partition
assignment: every compression codec, keys, headers and timestamps, idempotent producers (InitProducerId), per-key
order, nothing lost. What Kafka wrote is read over REST and the native protocol with the same key, value, headers
and timestamp, and what the native client wrote is read by a Kafka client. A tenant sees and names only its own
queues; another tenant's key, a wrong key and an anonymous connection get nothing.

Consumer groups: test_kafka_groups.py.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import socket
import struct
import time

import pytest
import websockets
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from tests.harness.gateway import make_queue
from tests.kafka.clients import confluent_config, kafka_python_config
from tests.kafka.raw import RawKafka
from tideway.native import Producer as NativeProducer
from tideway.native import TidewayClient
from tideway.record import decode_records, iter_batches

pytestmark = pytest.mark.timeout(300)

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")

SECOND = datetime.timedelta(seconds=1)


def _produce_confluent(bootstrap: str, key: str, topic: str, count: int, codec: str) -> list[tuple[bytes, bytes]]:
    producer = Producer(confluent_config(bootstrap, key, **{"enable.idempotence": True, "compression.type": codec,
                                                            "linger.ms": 5}))
    failed, sent = [], []
    for i in range(count):
        k, v = b"key-%d" % (i % 13), b"%s %06d" % (codec.encode(), i)
        producer.produce(topic, key=k, value=v, headers={"codec": codec.encode(), "n": b"%d" % i},
                         on_delivery=lambda error, _message: error is not None and failed.append(error))
        sent.append((k, v))
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "messages still unacknowledged"
    assert not failed, failed[:3]
    return sent


def _consume_confluent(bootstrap: str, key: str, topic: str, partitions: int, expected: int) -> list:
    consumer = Consumer(confluent_config(bootstrap, key, **{"group.id": "assigned-readers",
                                                            "enable.auto.commit": False}))
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got = []
    deadline = time.monotonic() + 60
    while len(got) < expected and time.monotonic() < deadline:
        for message in consumer.consume(1000, 1.0):
            assert message.error() is None, message.error()
            got.append(message)
    consumer.close()
    return got


def _consume_kafka_python(bootstrap: str, key: str, topic: str, partitions: int) -> list[tuple[bytes, bytes]]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaPythonPartition

    consumer = KafkaConsumer(**kafka_python_config(bootstrap, key, enable_auto_commit=False, group_id=None,
                                                   auto_offset_reset="earliest", consumer_timeout_ms=5_000))
    consumer.assign([KafkaPythonPartition(topic, p) for p in range(partitions)])
    consumer.seek_to_beginning()
    pairs = [(m.key, m.value) for m in consumer]
    consumer.close()
    return pairs


def _consume_aiokafka(bootstrap: str, key: str, topic: str, partitions: int, expected: int) -> list[tuple[bytes, bytes]]:
    async def read() -> list:
        from aiokafka import AIOKafkaConsumer
        from aiokafka import TopicPartition as AioPartition

        reader = AIOKafkaConsumer(bootstrap_servers=bootstrap, security_protocol="SASL_PLAINTEXT",
                                  sasl_mechanism="PLAIN", sasl_plain_username="tideway", sasl_plain_password=key,
                                  enable_auto_commit=False, auto_offset_reset="earliest")
        await reader.start()
        try:
            reader.assign([AioPartition(topic, p) for p in range(partitions)])
            out: list = []
            deadline = time.monotonic() + 60
            while len(out) < expected and time.monotonic() < deadline:
                for records in (await reader.getmany(timeout_ms=1000)).values():
                    out += [(r.key, r.value) for r in records]
            return out
        finally:
            await reader.stop()

    return asyncio.run(read())


def _in_key_order(pairs) -> bool:
    """Every key's values of one producer ("<codec> <n>") come in the order they were produced."""
    last: dict[tuple[bytes, bytes], int] = {}
    for k, v in pairs:
        producer, n = v.rsplit(b" ", 1)
        if last.get((k, producer), -1) >= int(n):
            return False
        last[(k, producer)] = int(n)
    return True


def test_librdkafka_produces_every_codec_and_reads_it_back(plane, tenant_a):
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=3, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    sent = []
    for codec in CODECS:
        sent += _produce_confluent(bootstrap, key, name, 2_000, codec)
    got = _consume_confluent(bootstrap, key, name, 3, len(sent))
    pairs = [(m.key(), m.value()) for m in got]
    assert sorted(pairs) == sorted(sent), f"{len(got)} of {len(sent)} read back"
    assert _in_key_order(pairs)
    for message in got[:50]:
        headers = dict(message.headers())
        assert headers["codec"] == message.value().split(b" ")[0]
        assert message.topic() == name  # the tenant's own name, never the broker-side one


def test_kafka_python_and_aiokafka_produce_and_read_by_assignment(plane, tenant_a):
    from kafka import KafkaProducer

    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=2, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    sent = []
    for codec in ("gzip", "lz4", "zstd", None):  # idempotence on (kafka-python 3's default)
        producer = KafkaProducer(**kafka_python_config(bootstrap, key, compression_type=codec, acks="all"))
        futures = []
        for i in range(1_000):
            k, v = b"k%d" % (i % 7), b"%s %06d" % (str(codec).encode(), i)
            futures.append(producer.send(name, key=k, value=v, headers=[("i", b"%d" % i)]))
            sent.append((k, v))
        producer.flush(60)
        assert all(f.get(10).offset >= 0 for f in futures)
        producer.close()

    pairs = _consume_kafka_python(bootstrap, key, name, 2)
    assert sorted(pairs) == sorted(sent) and _in_key_order(pairs)
    assert sorted(_consume_aiokafka(bootstrap, key, name, 2, len(sent))) == sorted(sent)


def test_one_log_every_protocol_keys_values_headers_and_timestamps(plane, tenant_a):
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=1, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap
    producer = Producer(confluent_config(bootstrap, key, **{"compression.type": "snappy"}))  # Tideway reads snappy
    stamp = 1_790_000_000_123
    producer.produce(name, key=b"order-1", value=b'{"total": 5}', headers=[("source", b"kafka")], timestamp=stamp)
    assert producer.flush(30) == 0

    # Over REST, the Kafka-written record as it was written.
    with plane.client(key) as api:
        read = api.get(f"/api/v1/queues/{name}/partitions/0/messages", params={"from": "earliest"}).json()["messages"]
    assert [(m["key"], m["value"], m["headers"], m["timestamp"]) for m in read] == [
        ("order-1", '{"total": 5}', {"source": "kafka"}, stamp)]

    # The native client writes; Kafka reads it, and the native client reads both.
    async def native() -> list:
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            async with NativeProducer(client, acks="all") as writer:
                await writer.send_and_wait(name, b'{"total": 7}', key=b"order-2", headers=[("source", b"native")],
                                           timestamp_ms=stamp + 1)
            fetched = await client.fetch(name, 0, 0)
            return [(r.key, r.value, r.headers, r.timestamp_ms)
                    for position, _length, _base in iter_batches(fetched.records)
                    for r in decode_records(fetched.records, position)]

    assert asyncio.run(native()) == [(b"order-1", b'{"total": 5}', (("source", b"kafka"),), stamp),
                                     (b"order-2", b'{"total": 7}', (("source", b"native"),), stamp + 1)]
    got = _consume_confluent(bootstrap, key, name, 1, 2)
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got] == [
        (b"order-1", b'{"total": 5}', [("source", b"kafka")], stamp),
        (b"order-2", b'{"total": 7}', [("source", b"native")], stamp + 1)]


def test_a_tenant_sees_only_its_own_and_strangers_get_nothing(plane, tenant_a, tenant_b):
    _slug_a, key_a = tenant_a
    _slug_b, key_b = tenant_b
    mine = make_queue(plane, key_a, partitions=1, mode="stream")
    theirs = make_queue(plane, key_b, partitions=1, mode="stream")
    bootstrap = plane.deployment.kafka_bootstrap

    listed = set(AdminClient(confluent_config(bootstrap, key_a)).list_topics(timeout=30).topics)
    with plane.client(key_a) as api:
        own = {q["name"] for q in api.get("/api/v1/queues/", params={"limit": 1000}).json()}
    assert mine in listed and theirs not in listed
    assert listed <= own | {f"{name}.dlq" for name in own}, listed - own  # its own names: no prefix, no internal topic

    # B names A's queue: refused (its own namespace has no such queue), nothing written.
    producer = Producer(confluent_config(bootstrap, key_b, **{"message.timeout.ms": 5_000}))
    failures = []
    producer.produce(mine, value=b"intruder", on_delivery=lambda error, _m: failures.append(error))
    producer.flush(15)
    assert failures and failures[0] is not None
    with plane.client(key_a) as api:
        assert api.get(f"/api/v1/queues/{mine}/partitions/0/messages", params={"from": "earliest"}).json()["messages"] == []

    # A wrong key: SASL authentication fails, and the client says so.
    wrong = Consumer(confluent_config(bootstrap, key_a[:-4] + "0000", **{"group.id": "g"}))
    with pytest.raises(KafkaException):
        wrong.list_topics(timeout=10)
    wrong.close()


def _kafka_frame(api_key: int, version: int, correlation_id: int, body: bytes = b"") -> bytes:
    header = struct.pack(">hhih", api_key, version, correlation_id, 4) + b"test"
    return struct.pack(">i", len(header) + len(body)) + header + body


def _read_frame(sock: socket.socket) -> bytes:
    (length,) = struct.unpack(">i", _read_exactly(sock, 4))
    return _read_exactly(sock, length)


def _read_exactly(sock: socket.socket, count: int) -> bytes:
    out = b""
    while len(out) < count:
        chunk = sock.recv(count - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_an_anonymous_connection_gets_api_versions_and_nothing_else(plane):
    host, port = plane.deployment.kafka_bootstrap.split(",")[0].split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        # ApiVersions v9 (newer than served): KIP-511's answer, v0-shaped, UNSUPPORTED_VERSION with the table.
        sock.sendall(_kafka_frame(18, 9, 1))
        answer = _read_frame(sock)
        correlation_id, error_code, count = struct.unpack_from(">ihi", answer)
        assert (correlation_id, error_code) == (1, 35) and count >= 8
        served = {struct.unpack_from(">hhh", answer, 10 + 6 * i)[0] for i in range(count)}
        assert {0, 1, 2, 3, 17, 18, 36} <= served
        # Metadata v1 before authenticating: the connection is closed, nothing is answered.
        sock.sendall(_kafka_frame(3, 1, 2, struct.pack(">i", -1)))
        with pytest.raises(ConnectionError):
            _read_frame(sock)


def test_a_version_not_served_is_answered_with_unsupported_version_where_its_answer_can_say_so(plane, tenant_a):
    """A request of a version the listener does not serve (a client that skipped ApiVersions): answered in that
    version's shape with UNSUPPORTED_VERSION, the connection still usable; where that version's answer has no error
    field to say it in (Produce v12: errors per partition only), the connection is closed, as Kafka's brokers do."""
    address = plane.deployment.kafka_bootstrap.split(",")[0]
    with RawKafka(address, tenant_a[1]) as kafka:
        answer = kafka.request(3, 13, topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
        assert answer.error_code == 35 and not answer.topics and not answer.brokers
        second = SECOND * 30
        joined = kafka.request(11, 9, group_id="g", session_timeout=second, rebalance_timeout=second, member_id="",
                               group_instance_id=None, protocol_type="consumer", protocols=(), reason=None)
        assert joined.error_code == 35
        served = kafka.request(3, 12, topics=None, allow_auto_topic_creation=False,
                               include_topic_authorized_operations=False)
        assert served.brokers and all(b.port > 0 for b in served.brokers)  # the same connection still serves
        with pytest.raises(ConnectionError):
            kafka.request(0, 12, transactional_id=None, acks=1, timeout=second, topic_data=())


def test_a_queue_mode_queue_is_a_stream_to_kafka_and_a_queue_to_websockets_and_rest(plane, tenant_a):
    """Kafka writes to a queue-mode queue; a WebSocket subscriber and a REST receiver (two queue groups) each get every
    message with the key, value, headers and timestamp written; a Kafka consumer reads the same records as a stream
    (docs/kafka.md), which takes nothing from the queue's groups."""
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=1, mode="queue")
    bootstrap = plane.deployment.kafka_bootstrap
    stamp = 1_790_000_100_000
    producer = Producer(confluent_config(bootstrap, key, **{"compression.type": "lz4"}))
    for i in range(10):
        producer.produce(name, key=b"k%d" % i, value=b"job %d" % i, headers=[("n", b"%d" % i)], timestamp=stamp + i)
    assert producer.flush(30) == 0
    written = [(f"k{i}", f"job {i}", {"n": str(i)}, stamp + i) for i in range(10)]

    async def over_websocket() -> list:
        url = plane.base_url.replace("http://", "ws://") + f"/ws/v1/queues/{name}"
        async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {key}"}) as ws:
            await ws.send(json.dumps({"type": "subscribe", "group": "web", "prefetch": 20}))
            got: list = []
            while len(got) < 10:
                frame = json.loads(await asyncio.wait_for(ws.recv(), 30))
                assert frame["type"] != "error", frame
                if frame["type"] == "messages":
                    got += frame["messages"]
            await ws.send(json.dumps({"type": "ack", "receipts": [m["receipt"] for m in got]}))
            return sorted((m["key"], m["value"], m["headers"], m["timestamp"]) for m in got)

    assert asyncio.run(over_websocket()) == written
    with plane.client(key) as api:
        received = api.post(f"/api/v1/queues/{name}/groups/rest/receive",
                            json={"max_messages": 10, "wait_seconds": 10}).json()["messages"]
    assert sorted((m["key"], m["value"], m["headers"], m["timestamp"]) for m in received) == written
    got = _consume_confluent(bootstrap, key, name, 1, 10)
    assert [(m.key(), m.value(), m.headers(), m.timestamp()[1]) for m in got] == [
        (b"k%d" % i, b"job %d" % i, [("n", b"%d" % i)], stamp + i) for i in range(10)]


def test_what_tideways_own_producer_writes_in_every_codec_every_kafka_client_reads(plane, tenant_a):
    """Batches Tideway's own producer compresses (none, gzip, snappy in Java's framing, lz4, zstd) are read by
    librdkafka, kafka-python and aiokafka, keys and values as written."""
    _slug, key = tenant_a
    name = make_queue(plane, key, partitions=1, mode="stream")
    sent = [(b"k%d" % (i % 5), b"%s %04d" % (codec.encode(), i)) for codec in CODECS for i in range(200)]

    async def write() -> None:
        async with TidewayClient(plane.deployment.bootstrap, api_key=key) as client:
            for codec in CODECS:
                async with NativeProducer(client, acks="all", compression=codec, linger_ms=5) as writer:
                    for k, v in sent:
                        if v.startswith(codec.encode() + b" "):
                            await writer.send(name, v, key=k, partition=0)

    asyncio.run(write())
    bootstrap = plane.deployment.kafka_bootstrap
    assert [(m.key(), m.value()) for m in _consume_confluent(bootstrap, key, name, 1, len(sent))] == sent

    assert _consume_kafka_python(bootstrap, key, name, 1) == sent
    assert _consume_aiokafka(bootstrap, key, name, 1, len(sent)) == sent
