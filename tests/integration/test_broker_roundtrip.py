"""Produce and consume through a real broker process (issue 2)."""

import asyncio
import socket
import time

import pytest

from tests.harness.processes import run_cli
from tideway.native import Consumer, Producer, SyncClient, SyncConsumer, SyncProducer, TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record import BatchBuilder

MESSAGES = 1_000_000
PARTITIONS = 4


def value_for(i: int) -> bytes:
    # 100 bytes whose content names its sequence number.
    return b"%010d" % i + b"." * 90


async def test_a_million_messages_come_back_complete_and_in_order(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("million", partitions=PARTITIONS)
    producer = Producer(broker.bootstrap, acks=1, linger_ms=5)
    await producer.start()
    sent_by_partition: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    futures = []
    for i in range(MESSAGES):
        key = b"k%d" % (i % 64)
        futures.append((i, await producer.send("million", value_for(i), key=key)))
    await producer.flush()
    for i, future in futures:
        metadata = await future
        sent_by_partition[metadata.partition].append(i)
    await producer.stop()
    assert sum(len(v) for v in sent_by_partition.values()) == MESSAGES

    consumer = Consumer(broker.bootstrap)
    await consumer.start()
    await consumer.assign([("million", p) for p in range(PARTITIONS)], start="earliest")
    received: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + 300
    total = 0
    while total < MESSAGES and time.monotonic() < deadline:
        for (_topic, partition), records in (await consumer.getmany(timeout_ms=1000)).items():
            for record in records:
                assert record.value[10:] == b"." * 90
                received[partition].append(int(record.value[:10]))
            total += len(records)
    await consumer.stop()
    for p in range(PARTITIONS):
        assert received[p] == sent_by_partition[p], f"partition {p} differs"


def test_twenty_thousand_lines_through_the_cli(broker):
    created = run_cli("topics", "create", "--bootstrap", broker.bootstrap, "lines", "--partitions", "3")
    assert created.returncode == 0, created.stderr
    lines = [b"line %d %s" % (i, b"x" * (i % 50)) for i in range(20_000)]
    produced = run_cli("produce", "--bootstrap", broker.bootstrap, "--topic", "lines", "--key", "same", input_bytes=b"\n".join(lines) + b"\n")
    assert produced.returncode == 0, produced.stderr
    assert b"produced 20000 of 20000" in produced.stderr
    consumed = run_cli("consume", "--bootstrap", broker.bootstrap, "--topic", "lines", "--from", "earliest", "--max", "20000")
    assert consumed.returncode == 0, consumed.stderr
    assert consumed.stdout.split(b"\n")[:-1] == lines  # one key: one partition, in order
    partial = run_cli("consume", "--bootstrap", broker.bootstrap, "--topic", "lines", "--from", "19990", "--idle-exit-ms", "500")
    assert partial.stdout.split(b"\n")[:-1] == lines[19990:]


def test_cli_reports_errors_and_exits_non_zero(broker):
    missing = run_cli("produce", "--bootstrap", broker.bootstrap, "--topic", "nope", input_bytes=b"a\n")
    assert missing.returncode == 1
    assert b"UNKNOWN_TOPIC_OR_PARTITION" in missing.stderr
    bad_config = run_cli("topics", "create", "--bootstrap", broker.bootstrap, "x", "--config", "retention.ms=soon")
    assert bad_config.returncode == 1 and b"INVALID_CONFIG" in bad_config.stderr
    run_cli("topics", "create", "--bootstrap", broker.bootstrap, "dup")
    dup = run_cli("topics", "create", "--bootstrap", broker.bootstrap, "dup")
    assert dup.returncode == 1 and b"TOPIC_ALREADY_EXISTS" in dup.stderr
    assert run_cli("topics", "delete", "--bootstrap", broker.bootstrap, "dup").returncode == 0
    assert b"dup" not in run_cli("topics", "list", "--bootstrap", broker.bootstrap).stdout


async def test_broker_refuses_bad_produce_input_with_error_codes(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("strict", configs={"max.message.bytes": "1000"})
        connection = await client.connection(1)

        async def produce(records: bytes, topic="strict", partition=0) -> m.ProducePartitionResult:
            response = await connection.request(
                ApiKey.PRODUCE, m.ProduceRequest(partitions=[m.ProducePartition(topic=topic, partition=partition, records=records)])
            )
            return response.partitions[0]

        big = BatchBuilder()
        big.append(1, None, b"z" * 2000)
        result = await produce(big.build())
        assert result.error_code == errors.MessageTooLargeError.errno
        assert "over the limit" in result.error_message

        good = BatchBuilder()
        good.append(1, None, b"fine")
        corrupt = bytearray(good.build())
        corrupt[-2] ^= 0xFF
        assert (await produce(bytes(corrupt))).error_code == errors.CorruptRecordError.errno
        assert (await produce(b"garbage")).error_code == errors.CorruptRecordError.errno
        assert (await produce(good.build(), topic="unknown")).error_code == errors.UnknownTopicOrPartitionError.errno
        assert (await produce(good.build(), partition=5)).error_code == errors.UnknownTopicOrPartitionError.errno
        with pytest.raises(errors.InvalidRequiredAcksError):
            await connection.request(ApiKey.PRODUCE, m.ProduceRequest(acks=2))
        (description,) = await client.describe_topics(["strict"])
        assert description.partitions[0].log_end_offset == 0  # nothing bad was stored
        assert (await produce(good.build())).base_offset == 0


async def test_long_poll_returns_as_soon_as_data_arrives(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("poll")
        connection = await client.connection(1)
        fetch = m.FetchRequest(max_wait_ms=10_000, min_bytes=1, partitions=[m.FetchPartition(topic="poll", partition=0, fetch_offset=0)])
        waiting = asyncio.ensure_future(connection.request(ApiKey.FETCH, fetch))
        await asyncio.sleep(0.3)
        assert not waiting.done()  # nothing to return yet: the broker holds the fetch
        async with Producer(client, linger_ms=0) as producer:
            await producer.send_and_wait("poll", b"wake up")
        response = await asyncio.wait_for(waiting, 5)
        assert response.partitions[0].records
        empty = await connection.request(ApiKey.FETCH, m.FetchRequest(max_wait_ms=100, partitions=[m.FetchPartition(topic="poll", partition=0, fetch_offset=1)]))
        assert empty.partitions[0].records == b"" and empty.partitions[0].high_watermark == 1


async def test_a_waiting_consumer_gets_the_records_before_the_producer_gets_its_acknowledgement(broker):
    # Every request on one connection, so the order of the answers on the wire is the order the broker wrote them.
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("first")
        connection = await client.connection(1)
        order: list[str] = []

        def fetch(offset: int) -> asyncio.Future:
            request = m.FetchRequest(max_wait_ms=10_000, min_bytes=1, partitions=[m.FetchPartition(topic="first", partition=0, fetch_offset=offset)])
            future = connection.send(ApiKey.FETCH, request)
            future.add_done_callback(lambda _: order.append(f"fetch from {offset}"))
            return future

        def produce(value: bytes) -> asyncio.Future:
            batch = BatchBuilder()
            batch.append(1, None, value)
            request = m.ProduceRequest(acks=1, partitions=[m.ProducePartition(topic="first", partition=0, records=batch.build())])
            future = connection.send(ApiKey.PRODUCE, request)
            future.add_done_callback(lambda _: order.append(f"produce {value.decode()}"))
            return future

        fetched = fetch(0)
        await asyncio.sleep(0.3)
        assert not fetched.done()  # held by the broker until data comes
        await asyncio.wait_for(asyncio.gather(fetched, produce(b"one")), 5)
        assert order == ["fetch from 0", "produce one"]

        # Two produces read at once (corked into one segment): the second, which woke nobody itself,
        # still answers after the delivery the first one woke.
        order.clear()
        fetched = fetch(1)
        await asyncio.sleep(0.3)
        sock = connection._transport.get_extra_info("socket")
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
        answers = [produce(b"two"), produce(b"three")]
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
        await asyncio.wait_for(asyncio.gather(fetched, *answers), 5)
        assert order == ["fetch from 1", "produce two", "produce three"]
        assert [answer.result().partitions[0].base_offset for answer in answers] == [1, 2]


async def test_produces_on_one_connection_append_in_the_order_sent_whatever_their_size(broker):
    # A large request starts a loop turn later than a small one (connection.py): the small ones after it wait for it.
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("order")
        connection = await client.connection(1)

        def produce(value: bytes) -> asyncio.Future:
            batch = BatchBuilder()
            batch.append(1, None, value)
            return connection.send(ApiKey.PRODUCE, m.ProduceRequest(acks=1, partitions=[
                m.ProducePartition(topic="order", partition=0, records=batch.build())]))

        sock = connection._transport.get_extra_info("socket")
        for _ in range(3):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
            answers = [produce(b"L" * (100 << 10)), produce(b"small"), produce(b"L" * (100 << 10)), produce(b"tiny")]
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 0)
            offsets = [answer.partitions[0].base_offset for answer in await asyncio.wait_for(asyncio.gather(*answers), 5)]
            assert offsets == list(range(offsets[0], offsets[0] + 4))


async def test_linger_zero_writes_a_lone_record_from_send_and_still_batches_a_burst(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("eager")
        async with Producer(client, linger_ms=0) as producer:
            await (await producer.send("eager", b"warm-up"))  # metadata and the connection are there now
            connection = client.open_connection(1)
            requests_before = connection._next_correlation_id
            lone = await producer.send("eager", b"lone")
            assert connection._next_correlation_id == requests_before + 1  # written before send returned
            assert (await lone).offset == 1
            requests_before = connection._next_correlation_id
            burst = [await producer.send("eager", b"%d" % i) for i in range(1000)]
            await producer.flush()
            # The first record went at once; the 999 sent meanwhile left together on the sender's turn.
            assert connection._next_correlation_id == requests_before + 2
            assert [(await future).offset for future in burst] == list(range(2, 1002))


async def test_an_answer_hook_runs_when_the_answer_is_read_and_its_failure_is_the_requests(broker):
    async with TidewayClient(broker.bootstrap) as client:
        connection = await client.connection(1)
        seen = []
        answered = asyncio.ensure_future(connection.request(ApiKey.API_VERSIONS, m.ApiVersionsRequest(), on_answer=seen.append))
        while not seen:  # the hook runs in the read callback, before the caller's task resumes
            await asyncio.sleep(0)
        assert not answered.done()
        assert await answered is seen[0]

        def broken(_response):
            raise ValueError("the hook failed")

        with pytest.raises(ValueError, match="the hook failed"):
            await connection.request(ApiKey.API_VERSIONS, m.ApiVersionsRequest(), on_answer=broken)
        assert (await connection.request(ApiKey.API_VERSIONS, m.ApiVersionsRequest())).apis  # still usable


async def test_consume_from_a_timestamp_and_from_latest(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("times")
        async with Producer(client, linger_ms=0) as producer:
            for i in range(10):
                await producer.send_and_wait("times", b"m%d" % i, timestamp_ms=1_000_000 + i * 1000)
        assert await client.list_offset("times", 0, 1_004_500) == (5, 1_005_000)
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([("times", 0)], start="@1004500")
        records = (await consumer.getmany(timeout_ms=2000))[("times", 0)]
        assert [r.value for r in records] == [b"m%d" % i for i in range(5, 10)]
        await consumer.seek(("times", 0), "latest")
        assert await consumer.getmany(timeout_ms=300) == {}
        await consumer.stop()


def test_sync_client_round_trip(broker):
    with SyncClient(broker.bootstrap) as admin:
        admin.create_topic("sync", partitions=2, configs={"flush": "always"})
        assert "sync" in admin.list_topics()
    with SyncProducer(broker.bootstrap, compression="zstd") as producer:
        metadata = producer.send_many("sync", [b"a", b"b", b"c"], key=b"k")
        assert [md.offset for md in metadata] == [0, 1, 2]
    with SyncConsumer(broker.bootstrap) as consumer:
        consumer.assign([("sync", metadata[0].partition)], start="earliest")
        values = [r.value for records in consumer.poll(2000).values() for r in records]
        assert values == [b"a", b"b", b"c"]


def test_partitions_grow_on_a_standalone_broker(broker):
    assert run_cli("topics", "create", "--bootstrap", broker.bootstrap, "grow", "--partitions", "2").returncode == 0
    grown = run_cli("topics", "add-partitions", "--bootstrap", broker.bootstrap, "grow", "--partitions", "4")
    assert grown.returncode == 0, grown.stderr
    shrink = run_cli("topics", "add-partitions", "--bootstrap", broker.bootstrap, "grow", "--partitions", "3")
    assert shrink.returncode == 1 and b"INVALID_PARTITIONS" in shrink.stderr
    produced = run_cli("produce", "--bootstrap", broker.bootstrap, "--topic", "grow", "--partition", "3", input_bytes=b"on the new partition\n")
    assert produced.returncode == 0, produced.stderr
    broker.terminate()
    broker.restart()  # the new partitions survive a restart
    consumed = run_cli("consume", "--bootstrap", broker.bootstrap, "--topic", "grow", "--partition", "3", "--from", "earliest", "--max", "1")
    assert consumed.stdout == b"on the new partition\n"


async def test_unkeyed_records_rotate_over_partitions_batch_by_batch(broker):
    """Issue 15: the sticky partition of unkeyed records moves on when its batch closes, and keeps moving after a wrap."""
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("spread", partitions=3)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            placed = [(await producer.send_and_wait("spread", b"%d" % i)).partition for i in range(30)]
    assert [placed.count(p) for p in range(3)] == [10, 10, 10]
    assert all(b == (a + 1) % 3 for a, b in zip(placed, placed[1:], strict=False))


async def test_records_waiting_for_a_request_slot_go_when_an_answer_frees_one(broker, monkeypatch):
    """With one request in flight at most, records sent meanwhile wait in an open batch; the answer that
    frees the slot sends them. (An answer wakes the sender only when something waits: without that wake
    they would sit until the sender's next periodic look, made 30 s here.)"""
    from tideway.native import producer as producer_module

    monkeypatch.setattr(producer_module, "SWEEP_INTERVAL_S", 30.0)
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("slot", partitions=1)
        async with Producer(client, acks=1, linger_ms=0, in_flight_per_broker_max=1) as producer:
            await producer.send_and_wait("slot", b"warm")  # the connection to the leader is open
            first = await producer.send("slot", b"first")  # written at once: the only request in flight
            waiting = [await producer.send("slot", b"%d" % i) for i in range(20)]  # an open batch, held
            assert producer._in_flight and producer._open
            offsets = [record.offset for record in await asyncio.wait_for(asyncio.gather(first, *waiting), 10)]
    assert offsets == list(range(1, 22))
