"""Kafka's transactional producer (librdkafka through confluent-kafka) against the brokers' transaction
coordinator (issue 44): committed transactions are read by read_committed consumers, aborted ones only by
read_uncommitted ones; a second instance with the same transactional id fences the first (its commit is
refused); a transaction left open past its timeout is aborted, the last stable offset moves on, and its
producer is fenced."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

from tests.harness.processes import OPERATOR_KEY
from tests.kafka.clients import confluent_config
from tideway.native import TidewayClient

pytestmark = pytest.mark.timeout(180)

TOPIC = "payments"


def _producer(bootstrap: str, transactional_id: str, **extra) -> Producer:
    return Producer(confluent_config(bootstrap, OPERATOR_KEY, **{"transactional.id": transactional_id,
                                                                 "linger.ms": 5, **extra}))


def _values(bootstrap: str, isolation_level: str, count: int, wait_s: float = 20, topic: str = TOPIC) -> list[bytes]:
    consumer = Consumer(confluent_config(bootstrap, OPERATOR_KEY, **{
        "group.id": f"check-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
        "isolation.level": isolation_level, "enable.auto.commit": False}))
    consumer.subscribe([topic])
    values: list[bytes] = []
    deadline = time.monotonic() + wait_s
    try:
        while time.monotonic() < deadline and len(values) < count:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        extra = consumer.poll(1.5)
        assert extra is None or extra.error() is not None, f"more than {count}: {extra.value()}"
    finally:
        consumer.close()
    return sorted(values)


def _fatal_or_fenced(exc: KafkaException) -> bool:
    error = exc.args[0]
    return error.fatal() or error.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                                              KafkaError.INVALID_PRODUCER_EPOCH)


async def test_commit_abort_fencing_and_timeouts_with_librdkafka(broker_factory):
    broker = broker_factory(kafka=True)
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=3)
    bootstrap = broker.kafka_bootstrap

    first = _producer(bootstrap, "orders-processor")
    first.init_transactions(30)
    first.begin_transaction()
    for i in range(6):
        first.produce(TOPIC, value=b"committed %d" % i, partition=i % 3)
    first.commit_transaction(30)
    first.begin_transaction()
    for i in range(4):
        first.produce(TOPIC, value=b"aborted %d" % i, partition=i % 3)
    assert first.flush(10) == 0  # written, then aborted (librdkafka drops what it has not sent yet)
    first.abort_transaction(30)

    committed = sorted(b"committed %d" % i for i in range(6))
    aborted = sorted(b"aborted %d" % i for i in range(4))
    assert _values(bootstrap, "read_committed", 6) == committed
    assert _values(bootstrap, "read_uncommitted", 10) == sorted(committed + aborted)

    # A second instance with the same transactional id fences the first.
    first.begin_transaction()
    first.produce(TOPIC, value=b"zombie", partition=0)
    first.flush(10)
    second = _producer(bootstrap, "orders-processor")
    second.init_transactions(30)  # aborts the first's open transaction and takes the next epoch
    with pytest.raises(KafkaException) as fenced:
        first.commit_transaction(30)
    assert _fatal_or_fenced(fenced.value)
    second.begin_transaction()
    second.produce(TOPIC, value=b"from the new instance", partition=0)
    second.commit_transaction(30)
    assert _values(bootstrap, "read_committed", 7) == sorted([*committed, b"from the new instance"])

    # Open past its timeout: aborted by the coordinator, the last stable offset moves on, the producer is fenced.
    slow = _producer(bootstrap, "slow-processor", **{"transaction.timeout.ms": 2000})
    slow.init_transactions(30)
    slow.begin_transaction()
    slow.produce(TOPIC, value=b"never committed", partition=1)
    slow.flush(10)
    plain = Producer(confluent_config(bootstrap, OPERATOR_KEY))
    plain.produce(TOPIC, value=b"after the open one", partition=1)
    plain.flush(10)
    time.sleep(4)
    assert b"after the open one" in _values(bootstrap, "read_committed", 8)
    with pytest.raises(KafkaException) as timed_out:
        slow.commit_transaction(30)
    assert _fatal_or_fenced(timed_out.value) or timed_out.value.args[0].code() == KafkaError.INVALID_TXN_STATE
    assert b"never committed" not in _values(bootstrap, "read_committed", 8)


def _process(bootstrap: str, group: str, transactional_id: str, *, rounds: int, abort_round: int | None = None) -> int:
    """A consume-transform-produce processor: each round reads what is there from ``in``, writes one output per
    input to ``out`` and commits the input offsets in the same transaction (``abort_round`` aborts instead, then
    the processor goes back to the committed offsets). How many inputs it handled in committed rounds."""
    consumer = Consumer(confluent_config(bootstrap, OPERATOR_KEY, **{
        "group.id": group, "auto.offset.reset": "earliest", "isolation.level": "read_committed",
        "enable.auto.commit": False}))
    producer = _producer(bootstrap, transactional_id)
    producer.init_transactions(30)
    consumer.subscribe(["in"])
    handled = 0
    try:
        for round_ in range(rounds):
            messages = [m for m in consumer.consume(20, 3) if m.error() is None]
            if not messages:
                continue
            producer.begin_transaction()
            for message in messages:
                producer.produce("out", value=b"out of " + message.value(), partition=message.partition(),
                                 headers=[("input-offset", str(message.offset()).encode())])
            producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                                 consumer.consumer_group_metadata(), 30)
            if round_ == abort_round:
                producer.flush(10)
                producer.abort_transaction(30)
                committed = consumer.committed(consumer.assignment(), 30)
                for tp in committed:  # back to what the group committed, as an application does after an abort
                    consumer.seek(tp if tp.offset >= 0 else type(tp)(tp.topic, tp.partition, 0))
                continue
            producer.commit_transaction(30)
            handled += len(messages)
    finally:
        consumer.close()
    return handled


async def test_consume_transform_produce_commits_outputs_and_input_offsets_together(broker_factory):
    broker = broker_factory(kafka=True)
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("in", partitions=2)
        await client.create_topic("out", partitions=2)
    bootstrap = broker.kafka_bootstrap
    source = Producer(confluent_config(bootstrap, OPERATOR_KEY))
    for i in range(40):
        source.produce("in", value=b"input %d" % i, partition=i % 2)
    assert source.flush(10) == 0

    first = _process(bootstrap, "processors", "processor-1", rounds=3, abort_round=1)
    rest = _process(bootstrap, "processors", "processor-1", rounds=6)  # a restart: from the committed offsets
    assert first + rest == 40

    outputs = _values(bootstrap, "read_committed", 40, topic="out")
    assert outputs == sorted(b"out of input %d" % i for i in range(40))  # each input exactly once
    assert len(_values(bootstrap, "read_uncommitted", 60, topic="out")) == 60  # and the aborted round's 20 too


async def test_kafka_python_lists_and_describes_transactions(broker_factory):
    """kafka-python's KafkaAdminClient.list_transactions / describe_transactions (ListTransactions and
    DescribeTransactions): an open transaction is listed as Ongoing with its producer, and described with its
    partitions."""
    from kafka.admin import KafkaAdminClient

    from tests.kafka.clients import kafka_python_config

    broker = broker_factory(kafka=True)
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=3)
    bootstrap = broker.kafka_bootstrap
    producer = _producer(bootstrap, "listed-processor")
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"open", partition=2)
    assert producer.flush(10) == 0
    admin = KafkaAdminClient(**kafka_python_config(bootstrap, OPERATOR_KEY))
    try:
        def listed(**filters) -> list:
            return [txn for listings in admin.list_transactions(**filters).values() for txn in listings
                    if txn.transactional_id == "listed-processor"]  # (every broker's share)

        ours = listed()
        assert len(ours) == 1 and ours[0].state.name == "ONGOING", ours
        assert listed(state_filters=["CompleteCommit"]) == []
        assert listed(state_filters=["Ongoing"]) == ours
        described = admin.describe_transactions(["listed-processor"])["listed-processor"]
        assert described.producer_id == ours[0].producer_id
        assert {(tp.topic, tp.partition) for tp in described.topic_partitions} == {(TOPIC, 2)}
        assert described.state.name == "ONGOING" and described.transaction_timeout_ms == 60_000
    finally:
        admin.close()
        producer.abort_transaction(30)
