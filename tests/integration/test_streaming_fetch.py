"""A consumer's fetch that waited stays open and answers again as records come (issue 19).

Against a real broker process: a FETCH with ``answers_max`` > 1 parked at the
end of a partition answers each produce as it is appended, under the one
correlation id, ``more`` set on every answer but the last; each answer starts
where the one before ended; the stream ends on its last allowed answer, when
its answers hold ``max_bytes``, or at ``max_wait_ms`` (an empty last answer).
A fetch that finds records at once answers once. Every streamed answer is
metered once. A queue coordinator's fetch of a remote leader streams too; an
inspector's does not. Bad values are refused and change nothing. A consumer on the
stream gets every record once, in order, and a seek during a stream takes
effect without a record from the old position.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from tests.harness.processes import CLUSTER_SECRET_HEX
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.conn import connect
from tideway.native.credentials import ClusterPeer
from tideway.native.traffic import describe_traffic
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record.batch import decode_records, iter_batches

TOPIC = "t1.stream"


def _offsets_and_values(records: bytes) -> list[tuple[int, bytes]]:
    out = []
    for position, _base, size in iter_batches(records):
        out.extend((r.offset, r.value) for r in decode_records(records[position : position + size]))
    return out


class _Answers:
    """Collects a fetch's answers as the connection reads them."""

    def __init__(self) -> None:
        self.answers: list[m.FetchResponse] = []

    def __call__(self, response: m.FetchResponse) -> None:
        self.answers.append(response)


async def _open_fetch(client: TidewayClient, offset: int, *, answers_max: int, max_wait_ms: int = 10_000,
                      max_bytes: int = 1 << 20, connection=None, replica_id: int = m.CONSUMER,
                      partitions: tuple[int, ...] = (0,)) -> tuple[asyncio.Future, _Answers]:
    """A fetch parked at the end of ``partitions``; ``connection`` defaults to the client's to the leader of 0."""
    connection = connection or await client.connection(client.leader_for(TOPIC, 0))
    answers = _Answers()
    request = m.FetchRequest(replica_id=replica_id, max_wait_ms=max_wait_ms, max_bytes=max_bytes, answers_max=answers_max,
                             partitions=[m.FetchPartition(topic=TOPIC, partition=p, fetch_offset=offset) for p in partitions])
    done = asyncio.ensure_future(connection.request(ApiKey.FETCH, request, timeout_s=30, on_answer=answers))
    await asyncio.sleep(0.5)  # parked at the broker by then (it must wait, or it answers once)
    return done, answers


async def _produce_one_by_one(producer: Producer, values: list[bytes]) -> None:
    for value in values:
        await (await producer.send(TOPIC, value, partition=0))
        await asyncio.sleep(0.05)


async def test_a_parked_fetch_answers_each_produce_then_ends_on_its_last_answer(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            done, answers = await _open_fetch(client, 0, answers_max=3)
            await _produce_one_by_one(producer, [b"a", b"b", b"c"])
            last = await asyncio.wait_for(done, 10)
            await _produce_one_by_one(producer, [b"d"])
        # Three answers under one request, the last one returned; none for the fourth record.
        assert [a.more for a in answers.answers] == [True, True, False]
        assert answers.answers[-1] is last
        got = [_offsets_and_values(a.partitions[0].records) for a in answers.answers]
        assert got == [[(0, b"a")], [(1, b"b")], [(2, b"c")]]
        assert [a.partitions[0].high_watermark for a in answers.answers] == [1, 2, 3]


async def test_a_stream_over_two_partitions_answers_each_produce_with_both_and_goes_on_from_there(broker):
    """The broker answers a parked stream in the produce that woke it: every partition in each answer."""
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=2)
        done, answers = await _open_fetch(client, 0, answers_max=10, max_wait_ms=1_500, partitions=(0, 1))
        async with Producer(client, acks=1, linger_ms=0) as producer:
            for partition, value in [(1, b"a"), (0, b"b"), (1, b"c")]:
                await (await producer.send(TOPIC, value, partition=partition))
                await asyncio.sleep(0.05)
        last = await asyncio.wait_for(done, 10)
    assert [a.more for a in answers.answers] == [True, True, True, False] and last is answers.answers[-1]
    per_answer = [[_offsets_and_values(r.records) for r in a.partitions] for a in answers.answers]
    assert per_answer == [[[], [(0, b"a")]], [[(0, b"b")], []], [[], [(1, b"c")]], [[], []]]
    assert [[r.high_watermark for r in a.partitions] for a in answers.answers] == [[0, 1], [1, 1], [1, 2], [1, 2]]


async def test_a_stream_ends_at_max_wait_with_an_empty_answer_and_when_its_bytes_are_used(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            done, answers = await _open_fetch(client, 0, answers_max=50, max_wait_ms=1_500)
            await _produce_one_by_one(producer, [b"x"])
            last = await asyncio.wait_for(done, 10)
            assert [a.more for a in answers.answers] == [True, False]
            assert last.partitions[0].records == b"" and last.partitions[0].high_watermark == 1

            # max_bytes covers the answers together: the answer that reaches it is the last.
            one_record = len((await client.fetch(TOPIC, 0, 0)).records)
            done, answers = await _open_fetch(client, 1, answers_max=50, max_bytes=2 * one_record)
            await _produce_one_by_one(producer, [b"y", b"z", b"w"])
            await asyncio.wait_for(done, 10)
        assert [a.more for a in answers.answers] == [True, False]
        assert [_offsets_and_values(a.partitions[0].records) for a in answers.answers] == [[(1, b"y")], [(2, b"z")]]


async def test_a_fetch_that_finds_records_answers_once(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            await _produce_one_by_one(producer, [b"1", b"2"])
            connection = await client.connection(client.leader_for(TOPIC, 0))
            answers = _Answers()
            request = m.FetchRequest(max_wait_ms=5_000, answers_max=10,
                                     partitions=[m.FetchPartition(topic=TOPIC, partition=0, fetch_offset=0)])
            response = await asyncio.wait_for(connection.request(ApiKey.FETCH, request, on_answer=answers), 2)
        assert response.more is False and answers.answers == [response]
        assert _offsets_and_values(response.partitions[0].records) == [(0, b"1"), (1, b"2")]


async def test_every_streamed_answer_is_metered_once(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            done, answers = await _open_fetch(client, 0, answers_max=4)
            await _produce_one_by_one(producer, [b"p" * 10, b"q" * 20, b"r" * 30, b"s" * 40])
            await asyncio.wait_for(done, 10)
        served = sum(len(a.partitions[0].records) for a in answers.answers)
        counters = (await describe_traffic(client, [TOPIC])).topics[TOPIC]
        assert counters[2:] == [4, served]  # messages out, bytes out


async def test_bad_answers_max_is_refused(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        connection = await client.connection(client.leader_for(TOPIC, 0))
        partitions = [m.FetchPartition(topic=TOPIC, partition=0, fetch_offset=0)]
        with pytest.raises(errors.InvalidRequestError, match="answers_max must be at least 1"):
            await connection.request(ApiKey.FETCH, m.FetchRequest(answers_max=0, max_wait_ms=0, partitions=partitions))
        # An inspector's fetch (a platform service; here a cluster peer, on the internal listener) never streams.
        peer = await _peer(broker)
        try:
            with pytest.raises(errors.InvalidRequestError, match="only a consumer's or a queue reader's fetch may answer more"):
                await peer.request(ApiKey.FETCH, m.FetchRequest(replica_id=m.INSPECTOR, answers_max=2,
                                                                max_wait_ms=0, partitions=partitions))
            answered = await peer.request(ApiKey.FETCH, m.FetchRequest(replica_id=m.INSPECTOR, max_wait_ms=0,
                                                                       partitions=partitions))
            assert answered.more is False and answered.partitions[0].error_code == 0
        finally:
            peer.close()
        # The connection still serves.
        assert (await client.fetch(TOPIC, 0, 0)).records == b""


async def _peer(broker):
    """A connection as a cluster peer (another broker), on the internal listener."""
    return await connect("127.0.0.1", broker.internal_port,
                         credentials=ClusterPeer(bytes.fromhex(CLUSTER_SECRET_HEX), identity="test-coordinator"))


async def test_a_queue_readers_fetch_streams_too(broker):
    """A queue coordinator watching a remote leader: one request, an answer per produce."""
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        peer = await _peer(broker)
        try:
            done, answers = await _open_fetch(client, 0, answers_max=2, connection=peer, replica_id=m.QUEUE_READER)
            async with Producer(client, acks=1, linger_ms=0) as producer:
                await _produce_one_by_one(producer, [b"one", b"two"])
            last = await asyncio.wait_for(done, 10)
        finally:
            peer.close()
    assert [a.more for a in answers.answers] == [True, False] and last is answers.answers[-1]
    assert [_offsets_and_values(a.partitions[0].records) for a in answers.answers] == [[(0, b"one")], [(1, b"two")]]


async def test_a_consumer_on_a_stream_gets_every_record_once_in_order_and_a_seek_takes_effect(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1)
        async with Producer(client, acks=1, linger_ms=0) as producer:
            consumer = Consumer(client, fetch_max_wait_ms=2_000)
            await consumer.start()
            await consumer.assign([(TOPIC, 0)], start="latest")
            await consumer.getmany(timeout_ms=200)  # the fetch is parked
            got: list[bytes] = []
            for i in range(60):
                await (await producer.send(TOPIC, b"m%d" % i, partition=0))
                for records in (await consumer.getmany(timeout_ms=0)).values():
                    got.extend(r.value for r in records)
                await asyncio.sleep(0.002)
            deadline = time.monotonic() + 10
            while len(got) < 60 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(r.value for r in records)
            assert got == [b"m%d" % i for i in range(60)]

            # A seek while the fetch streams: nothing from the old position comes after it.
            await consumer.seek((TOPIC, 0), 10)
            await (await producer.send(TOPIC, b"after", partition=0))
            after: list[tuple[int, bytes]] = []
            deadline = time.monotonic() + 10
            while len(after) < 51 and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    after.extend((r.offset, r.value) for r in records)
            await consumer.stop()
        assert after == [(i, b"m%d" % i) for i in range(10, 60)] + [(60, b"after")]
