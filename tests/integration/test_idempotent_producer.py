"""Resent batches are recognised by the broker across restarts and failovers (issue 3)."""

import asyncio
import signal

from tests.integration.test_replication import TOPIC, FakeController, describe
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.conn import connect
from tideway.native.credentials import default_credentials
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record import BatchBuilder


def batch(producer_id: int, sequence: int, count: int) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence)
    for i in range(count):
        builder.append(1, None, b"seq %d" % (sequence + i))
    return builder.build()


async def produce_raw(port: int, data: bytes, topic: str, acks: int = -1) -> m.ProducePartitionResult:
    connection = await connect("127.0.0.1", port, credentials=default_credentials())
    try:
        response = await connection.request(
            ApiKey.PRODUCE, m.ProduceRequest(acks=acks, partitions=[m.ProducePartition(topic=topic, partition=0, records=data)])
        )
        return response.partitions[0]
    finally:
        connection.close()


async def test_a_resend_after_sigkill_restart_is_not_written_twice(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("idem")
    first = await produce_raw(broker.port, batch(42, 0, 10), "idem", acks=1)
    broker.kill()
    broker.restart()
    again = await produce_raw(broker.port, batch(42, 0, 10), "idem", acks=1)
    assert (again.error_code, again.base_offset) == (0, first.base_offset)
    nxt = await produce_raw(broker.port, batch(42, 10, 5), "idem", acks=1)
    assert nxt.base_offset == 10
    async with TidewayClient(broker.bootstrap) as client:
        (topic,) = await client.describe_topics(["idem"])
        assert topic.partitions[0].log_end_offset == 15


async def test_a_resend_to_a_new_leader_is_recognised(broker_factory):
    cluster = [broker_factory(f"b{i}", broker_id=i) for i in (1, 2, 3)]
    controller = FakeController(cluster)
    await controller.push(leader=1, leader_epoch=1, isr=[1, 2, 3])
    first = await produce_raw(cluster[0].port, batch(99, 0, 20), TOPIC)  # acks=all: every replica has it
    assert first.error_code == 0
    cluster[0].kill()
    await controller.push(leader=2, leader_epoch=2, isr=[2, 3], to=[2, 3])
    again = await produce_raw(cluster[1].port, batch(99, 0, 20), TOPIC)
    assert (again.error_code, again.base_offset) == (0, first.base_offset)
    assert (await describe(cluster[1])).log_end_offset == 20


async def test_idempotent_producer_client_writes_each_record_once(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("once")
    async with Producer(broker.bootstrap, acks="all") as producer:
        assert producer.idempotent and producer.producer_id >= 0
        futures = [await producer.send("once", b"v%d" % i) for i in range(1000)]
        assert [(await f).offset for f in futures] == list(range(1000))
    consumer = Consumer(broker.bootstrap)
    await consumer.start()
    await consumer.assign([("once", 0)], start="earliest")
    values = []
    while len(values) < 1000:
        values += [r.value for rs in (await consumer.getmany(timeout_ms=2000)).values() for r in rs]
    await consumer.stop()
    assert values == [b"v%d" % i for i in range(1000)]


async def test_records_sent_one_by_one_while_a_partition_is_busy_join_one_batch(broker):
    """As a gateway publishing one message per frame: no linger, a loop turn between sends.

    While the partition has its most batches in flight (here: the broker is
    stopped, so none is answered), the records that follow wait in one open
    batch, as Kafka's accumulator does, instead of queueing as one-record
    batches; once the broker answers, every record is acknowledged, in order.
    """
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("one-by-one")
    async with Producer(broker.bootstrap, acks="all", linger_ms=0) as producer:
        await (await producer.send("one-by-one", b"first", partition=0))  # connected, metadata known
        batch_sizes = []
        send_request = producer._send_request

        def counting(leader, connection, batches):
            batch_sizes.extend(len(b.builder) for b in batches)
            send_request(leader, connection, batches)

        producer._send_request = counting
        broker.signal(signal.SIGSTOP)
        try:
            futures = []
            for i in range(3000):
                futures.append(await producer.send("one-by-one", b"%d" % i, partition=0))
                await asyncio.sleep(0)  # the sender runs between two records
        finally:
            broker.signal(signal.SIGCONT)
        offsets = [(await future).offset for future in futures]
    assert offsets == list(range(1, 3001))
    assert sum(batch_sizes) == 3000
    # The first few went out one record each before the partition's in-flight cap was reached.
    assert len(batch_sizes) <= 10, f"{len(batch_sizes)} batches for 3,000 records: {batch_sizes[:20]}"


async def test_a_batch_that_can_never_be_sent_is_failed_at_its_delivery_timeout(broker):
    """Every send gets an answer within the delivery timeout, whatever holds its batch back (here: its
    partition's count of batches in flight, left at the cap as a lost answer could leave it)."""
    from tideway.native.producer import IN_FLIGHT_BATCHES_PER_PARTITION_MAX
    from tideway.protocol import errors

    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("held", partitions=2)
    async with Producer(broker.bootstrap, acks="all", delivery_timeout_ms=1500) as producer:
        await (await producer.send("held", b"first", partition=0))
        producer._partition_in_flight[("held", 0)] = IN_FLIGHT_BATCHES_PER_PARTITION_MAX
        stuck = await producer.send("held", b"never sent", partition=0)
        fine = await producer.send("held", b"other partition", partition=1)
        assert (await asyncio.wait_for(fine, 5)).offset == 0
        try:
            await asyncio.wait_for(stuck, 5)
        except errors.RequestTimedOutError as exc:
            assert "delivery timeout" in str(exc)
        else:
            raise AssertionError("the held batch was acknowledged")
        producer._partition_in_flight.pop(("held", 0), None)
        assert (await asyncio.wait_for(await producer.send("held", b"after", partition=0), 5)).offset >= 1
