"""Reading around transactions (issue 44, reads by isolation level) on a real broker: two transactional
producers' records with plain records between; then one transaction commits and the other aborts (their
coordinator writes the markers). A transactional write to a partition not added to its transaction is refused.

While they are open, read_committed readers (Tideway's consumer, a queue group, librdkafka) stop at the first
one (the last stable offset) and read_uncommitted readers see everything; once the markers are written,
read_committed readers get the committed records and never the aborted ones, read_uncommitted ones get both,
nobody ever gets a marker as a message, and a consumer's position moves past the markers to the log's end.
"""

from __future__ import annotations

import asyncio
import re
import time

import pytest
from confluent_kafka import Consumer as KafkaConsumer

from tests.harness.processes import OPERATOR_KEY, run_cli
from tests.kafka.clients import confluent_config
from tideway.native import Consumer, TidewayClient, TransactionalProducer
from tideway.native.queue import QueueConsumer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record import BatchBuilder
from tideway.record.batch import ATTRIBUTE_TRANSACTIONAL

pytestmark = pytest.mark.timeout(120)

TOPIC = "ledger"


def _batch(values: list[bytes], producer_id: int = -1, sequence: int = -1) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
                           base_sequence=sequence, flags=ATTRIBUTE_TRANSACTIONAL if producer_id >= 0 else 0)
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return builder.build()


async def _produce(client: TidewayClient, data: bytes) -> None:
    request = m.ProduceRequest(acks=-1, partitions=[m.ProducePartition(topic=TOPIC, partition=0, records=data)])
    (result,) = (await client.request_any(ApiKey.PRODUCE, request)).partitions
    assert result.error_code == 0, result


async def _read(bootstrap: str, isolation_level: str, count: int) -> tuple[list[bytes], int]:
    """``count`` values (waiting up to 10 s for them), and then whether more came, and the position after."""
    async with Consumer(bootstrap, auto_offset_reset="earliest", isolation_level=isolation_level,
                        fetch_max_wait_ms=100) as consumer:
        await consumer.assign([(TOPIC, 0)], start="earliest")
        values: list[bytes] = []
        deadline = time.monotonic() + 10
        while len(values) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(200)).values():
                values += [r.value for r in records]
        for records in (await consumer.getmany(500)).values():  # nothing more
            values += [r.value for r in records]
        return values, consumer.position((TOPIC, 0))


def _kafka_values(bootstrap: str, isolation_level: str, count: int) -> list[bytes]:
    consumer = KafkaConsumer(confluent_config(bootstrap, OPERATOR_KEY, **{
        "group.id": f"reader-{isolation_level}-{time.monotonic_ns()}", "auto.offset.reset": "earliest",
        "isolation.level": isolation_level, "enable.auto.commit": False}))
    consumer.subscribe([TOPIC])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and len(values) < count:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append(message.value())
        extra = consumer.poll(1)
        assert extra is None or extra.error() is not None, f"more than {count}: {extra.value()}"
    finally:
        consumer.close()
    return values


async def test_read_committed_stops_at_open_transactions_and_drops_aborted_ones(broker_factory):
    broker = broker_factory(kafka=True)
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        committing = TransactionalProducer(client, "committing", linger_ms=0)
        aborting = TransactionalProducer(client, "aborting", linger_ms=0)
        await committing.start()
        await aborting.start()
        await _produce(client, _batch([b"plain 0"]))  # 0
        committing.begin()
        aborting.begin()
        for value in (b"kept 1", b"kept 2"):  # 1-2
            await (await committing.send(TOPIC, value, partition=0))
        await (await aborting.send(TOPIC, b"dropped 3", partition=0))  # 3
        await _produce(client, _batch([b"plain 4"]))  # 4
        await (await committing.send(TOPIC, b"kept 5", partition=0))  # 5

        # A transactional write to a partition not added to the producer's transaction is refused (KIP-890).
        await client.create_topic("other", partitions=1)
        unadded = _batch([b"sneaked in"], aborting.producer_id, 1)
        for transactional_id in ("", "aborting"):
            request = m.ProduceRequest(acks=-1, transactional_id=transactional_id, partitions=[
                m.ProducePartition(topic="other", partition=0, records=unadded)])
            (result,) = (await client.request_any(ApiKey.PRODUCE, request)).partitions
            assert result.error_code == errors.InvalidTxnStateError.errno, result

        async with QueueConsumer(broker.bootstrap, "workers", TOPIC) as queue:
            # Open: read_committed stops before the first transaction's records.
            assert (await _read(broker.bootstrap, "read_committed", 1)) == ([b"plain 0"], 1)
            everything = [b"plain 0", b"kept 1", b"kept 2", b"dropped 3", b"plain 4", b"kept 5"]
            assert (await _read(broker.bootstrap, "read_uncommitted", 6)) == (everything, 6)
            received = await queue.receive(10, wait_ms=1_000)
            assert [message.value for message in received] == [b"plain 0"]
            await queue.ack(received)
            # The end that lag is counted against: the last stable offset (read_uncommitted: the high watermark).
            assert (await client.list_offset(TOPIC, 0, m.LATEST_TIMESTAMP))[0] == 1

            await committing.commit()  # its marker at offset 6
            await aborting.abort()  # its marker at 7
            await committing.stop()
            await aborting.stop()

            committed = [b"plain 0", b"kept 1", b"kept 2", b"plain 4", b"kept 5"]
            assert (await _read(broker.bootstrap, "read_committed", 5)) == (committed, 8)  # past the markers
            assert (await _read(broker.bootstrap, "read_uncommitted", 6)) == (everything, 8)
            received = []
            for _ in range(10):
                received += await queue.receive(10, wait_ms=500)
                if len(received) >= 4:
                    break
            assert [message.value for message in received] == committed[1:]
            await queue.ack(received)
            assert await queue.receive(10, wait_ms=500) == []

        result = await client.fetch(TOPIC, 0, 0)
        assert result.last_stable_offset == result.high_watermark == 8
        assert result.aborted_transactions == [(aborting.producer_id, 3)]

    # Kafka clients read the same through the Kafka listener.
    kafka = broker.kafka_bootstrap
    assert await asyncio.to_thread(_kafka_values, kafka, "read_committed", 5) == committed
    assert await asyncio.to_thread(_kafka_values, kafka, "read_uncommitted", 6) == everything


async def test_the_native_transactional_producer_commits_aborts_commits_offsets_and_is_fenced(broker_factory):
    """TransactionalProducer: committed writes and offsets count together, aborted ones do not; a second
    instance fences the first."""
    from tideway.native.group import CoordinatorLink, fetch_committed

    broker = broker_factory()
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("inputs", partitions=2)
        await client.create_topic("outputs", partitions=2)
        async with TransactionalProducer(client, "enricher", linger_ms=1) as producer:
            with pytest.raises(errors.InvalidTxnStateError):  # outside a transaction: refused, nothing queued
                await producer.send("outputs", b"no transaction", partition=0)
            with pytest.raises(errors.InvalidTxnStateError):
                await producer.send_many("outputs", [(b"no transaction", None, None, 1)])
            producer.begin()
            for i in range(10):
                await producer.send("outputs", b"kept %d" % i, key=b"k%d" % i)
            await producer.send_offsets({("inputs", 0): 5, ("inputs", 1): 5}, group_id="enrichers")
            await producer.commit()
            with pytest.raises(errors.InvalidTxnStateError):  # the transaction ended: its partitions with it
                await producer.send("outputs", b"after the commit", key=b"k0")
            producer.begin()
            for i in range(4):
                await producer.send("outputs", b"dropped %d" % i, partition=i % 2)
            await producer.send_offsets({("inputs", 0): 9}, group_id="enrichers")
            await producer.abort()

            link = CoordinatorLink(client, "enrichers")
            assert await fetch_committed(link, [("inputs", 0), ("inputs", 1)]) == {("inputs", 0): 5, ("inputs", 1): 5}
            values = []
            for partition in (0, 1):
                async with Consumer(client, isolation_level="read_committed") as consumer:
                    await consumer.assign([("outputs", partition)], start="earliest")
                    for records in (await consumer.getmany(2_000)).values():
                        values += [r.value for r in records]
            assert sorted(values) == sorted(b"kept %d" % i for i in range(10))

            # Operators see it, and may abort it (tideway transactions).
            producer.begin()
            await (await producer.send("outputs", b"left open", partition=1))
            listed = (await asyncio.to_thread(run_cli, "transactions", "list", "--bootstrap", broker.bootstrap)).stdout
            assert re.search(r"enricher\s+Ongoing\s+\d+\s+0\s+\d+\.\ds", listed.decode()), listed
            described = await asyncio.to_thread(run_cli, "transactions", "describe", "enricher", "--bootstrap",
                                                broker.bootstrap)
            assert b"Ongoing" in described.stdout and b"outputs-1" in described.stdout
            aborted = await asyncio.to_thread(run_cli, "transactions", "abort", "enricher", "--bootstrap", broker.bootstrap)
            assert aborted.returncode == 0, aborted.stderr
            with pytest.raises(errors.InvalidTxnStateError):
                await producer.commit()  # it was aborted
            await producer.abort()  # what an application does then

            async with TransactionalProducer(client, "enricher") as newer:  # the same id: the first is fenced
                producer.begin()
                with pytest.raises((errors.ProducerFencedError, errors.InvalidProducerEpochError)):
                    await producer.send("outputs", b"zombie", partition=0)
                    await producer.commit()
                newer.begin()
                await newer.send("outputs", b"from the newer one", partition=0)
                await newer.commit()


async def test_a_transactional_id_with_no_transaction_for_its_expiry_is_forgotten(broker_factory):
    """transactional.id.expiration.ms: an id whose last transaction ended longer ago than the expiry leaves its
    coordinator (and __transaction_state); one with an open transaction stays; a next init starts it afresh."""
    from tideway.native.transactions import list_transactions

    broker = broker_factory(extra_args=["--transactional-id-expiration-ms", "3000"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("outputs", partitions=1)
        idle = TransactionalProducer(client, "short-lived", linger_ms=1)
        await idle.start()
        idle.begin()
        await (await idle.send("outputs", b"one", partition=0))
        await idle.commit()
        busy = TransactionalProducer(client, "long-lived", linger_ms=1, transaction_timeout_ms=60_000)
        await busy.start()
        busy.begin()
        await (await busy.send("outputs", b"open", partition=0))
        assert {t.transactional_id for t in await list_transactions(client)} == {"short-lived", "long-lived"}
        deadline = time.monotonic() + 20
        while "short-lived" in {t.transactional_id for t in await list_transactions(client)}:
            assert time.monotonic() < deadline, "the idle transactional id was never forgotten"
            await asyncio.sleep(0.5)
        assert {t.transactional_id for t in await list_transactions(client)} == {"long-lived"}
        idle.begin()  # the forgotten instance is refused; a new one starts afresh
        await idle.send("outputs", b"two", partition=0)
        with pytest.raises(errors.InvalidProducerIdMappingError):
            await idle.commit()  # (an abort is refused the same way: this instance is done)
        async with TransactionalProducer(client, "short-lived", linger_ms=1) as again:
            again.begin()
            await (await again.send("outputs", b"three", partition=0))
            await again.commit()
        await busy.commit()
        await idle.stop()
        await busy.stop()


async def test_a_transactions_first_writes_sent_back_to_back_are_appended_in_the_order_sent(broker_factory):
    """The first transactional write to a partition waits for its KIP-890 check; writes of the same producer sent
    right behind it (separate requests, one connection, as a producer with linger 0 or librdkafka sends them) must
    not overtake it. They did, once: out-of-order sequence refusals, each costing the producer a 100 ms back-off
    (a read_committed p99 of 115 ms at 1,000 msgs/s)."""
    broker = broker_factory()
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with TransactionalProducer(client, "pipelined", linger_ms=0) as producer:
            connection = await client.connection(client.leader_for(TOPIC, 0))
            sequence = 0
            for round_ in range(20):
                producer.begin()
                producer._add_soon({(TOPIC, 0)})  # (what a first send does)
                await producer._added_all()
                sent = []
                for i in range(6):  # back to back: the first of them opens the transaction at the partition
                    records = _batch([b"%d-%d" % (round_, i)], producer.producer_id, sequence)
                    sequence += 1
                    sent.append(connection.send(ApiKey.PRODUCE, m.ProduceRequest(
                        acks=-1, transactional_id="pipelined",
                        partitions=[m.ProducePartition(topic=TOPIC, partition=0, records=records)])))
                answers = [(await answer).partitions[0] for answer in sent]
                assert [a.error_code for a in answers] == [0] * 6, answers
                assert [a.base_offset for a in answers] == sorted(a.base_offset for a in answers), answers
                await producer.commit()
