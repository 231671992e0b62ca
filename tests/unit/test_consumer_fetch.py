"""The consumer keeps every record a broker served it, even when part of a fetch fails.

Brokers meter what they serve (egress); a record served but dropped by the client would be
billed and never seen. A fake client stands in for the brokers: this is a unit test of the
consumer's fetch loop alone (the whole path is covered by tests/fault/test_usage_crash.py).
"""

from __future__ import annotations

import asyncio

from tideway.native.consumer import Consumer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.record.batch import BatchBuilder, stamp_batch


def _batch(base_offset: int, values: list[bytes]) -> bytes:
    builder = BatchBuilder()
    for value in values:
        builder.append(1_700_000_000_000, None, value)
    data = bytearray(builder.build())
    stamp_batch(data, 0, base_offset, 0)
    return bytes(data)


class _Connection:
    def __init__(self, answer) -> None:
        self._answer = answer
        self.requests: list[m.FetchRequest] = []

    async def request(self, api, request, timeout_s, on_answer=None):
        self.requests.append(request)
        await asyncio.sleep(0)  # as over a socket: the answer comes on a later loop turn, never at once
        response = await self._answer(request, len(self.requests))
        if on_answer is not None:  # as tideway.native.conn.Connection: in its read callback, with a successful answer
            on_answer(response)
        return response


class _Client:
    request_timeout_s = 1.0

    def __init__(self, leaders: dict[tuple[str, int], int], connections: dict[int, _Connection]) -> None:
        self.leaders = leaders
        self.connections = connections
        self.refreshes = 0

    def leader_for(self, topic: str, partition: int) -> int:
        return self.leaders[(topic, partition)]

    async def connection(self, broker: int) -> _Connection:
        return self.connections[broker]

    def read_timeout_s(self, wait_s: float = 0.0) -> float:
        return wait_s + self.request_timeout_s

    async def refresh_metadata(self) -> None:
        self.refreshes += 1

    async def partitions_for(self, topic: str) -> int:
        return 2


async def _received(consumer: Consumer, want: int) -> list[bytes]:
    values: list[bytes] = []
    for _ in range(50):
        for records in (await consumer.getmany(timeout_ms=100)).values():
            values.extend(r.value for r in records)
        if len(values) >= want:
            break
    return values


async def _eventually(condition) -> bool:
    for _ in range(100):
        if condition():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_a_partition_whose_leader_moved_does_not_drop_the_records_of_the_others():
    async def answer(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        results = []
        for part in request.partitions:
            if part.partition == 0:  # this broker no longer leads partition 0; listed first
                results.append(m.FetchPartitionResult(topic="t", partition=0, error_code=errors.NotLeaderError.errno,
                                                      error_message="moved"))
            elif part.fetch_offset == 0:
                results.append(m.FetchPartitionResult(topic="t", partition=1, high_watermark=2,
                                                      records=_batch(0, [b"a", b"b"])))
            else:
                await asyncio.sleep(0.05)
                results.append(m.FetchPartitionResult(topic="t", partition=1, high_watermark=2))
        return m.FetchResponse(partitions=results)

    connection = _Connection(answer)
    client = _Client({("t", 0): 1, ("t", 1): 1}, {1: connection})
    consumer = Consumer(client)
    await consumer.assign([("t", 0), ("t", 1)], start=0)
    await consumer.start()
    try:
        assert await _received(consumer, 2) == [b"a", b"b"]  # served once, kept though partition 0 failed
        assert await _eventually(lambda: client.refreshes >= 1)  # and the error still sent it looking for the new leader
    finally:
        await consumer.stop()


async def test_a_failed_fetch_is_retried_only_once_every_fetch_of_the_round_has_ended():
    async def fails(request, nth):
        raise errors.ConnectionClosedError("broker killed")

    async def slow(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        if nth == 1:
            await asyncio.sleep(0.2)  # still out when the other broker's fetch fails
            return m.FetchResponse(partitions=[m.FetchPartitionResult(
                topic="t", partition=1, high_watermark=3, records=_batch(0, [b"x", b"y", b"z"]))])
        await asyncio.sleep(0.05)
        return m.FetchResponse(partitions=[m.FetchPartitionResult(topic="t", partition=1, high_watermark=3)])

    slow_connection = _Connection(slow)
    client = _Client({("t", 0): 1, ("t", 1): 2}, {1: _Connection(fails), 2: slow_connection})
    consumer = Consumer(client)
    await consumer.assign([("t", 0), ("t", 1)], start=0)
    await consumer.start()
    try:
        assert await _received(consumer, 3) == [b"x", b"y", b"z"]
        # No second fetch of partition 1 from offset 0 raced the first: its answer would have
        # been served (and metered) and thrown away.
        assert await _eventually(lambda: len(slow_connection.requests) >= 2)
        assert [r.partitions[0].fetch_offset for r in slow_connection.requests][:2] == [0, 3]
    finally:
        await consumer.stop()


async def test_a_partition_removed_while_the_connection_is_made_is_not_fetched():
    """A group member's partitions are revoked at any moment: that must not fail the fetcher (it was a KeyError)."""
    async def answer(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        return m.FetchResponse(partitions=[m.FetchPartitionResult(topic=p.topic, partition=p.partition, high_watermark=1,
                                                                  records=_batch(0, [b"kept"]) if p.fetch_offset == 0 else b"")
                                           for p in request.partitions])

    connection = _Connection(answer)
    consumer_box: list[Consumer] = []

    class _Revoking(_Client):
        async def connection(self, broker: int) -> _Connection:
            consumer_box[0].remove([("t", 0)])  # revoked while connecting
            return await super().connection(broker)

    client = _Revoking({("t", 0): 1, ("t", 1): 1}, {1: connection})
    consumer = Consumer(client)
    consumer_box.append(consumer)
    await consumer.assign([("t", 0), ("t", 1)], start=0)
    await consumer.start()
    try:
        assert await _received(consumer, 1) == [b"kept"]
        assert connection.requests and all([p.partition for p in r.partitions] == [1] for r in connection.requests)
    finally:
        await consumer.stop()


async def test_a_batch_split_by_max_records_comes_out_whole_in_order_and_positions_follow():
    async def answer(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        part = request.partitions[0]
        if part.fetch_offset == 0:
            return m.FetchResponse(partitions=[m.FetchPartitionResult(
                topic="t", partition=0, high_watermark=10, records=_batch(0, [b"%d" % i for i in range(10)]))])
        await asyncio.sleep(0.05)
        return m.FetchResponse(partitions=[m.FetchPartitionResult(topic="t", partition=0, high_watermark=10)])

    consumer = Consumer(_Client({("t", 0): 1}, {1: _Connection(answer)}))
    await consumer.assign([("t", 0)], start=0)
    await consumer.start()
    try:
        chunks, positions = [], []
        while sum(chunks, []) != list(range(10)) and len(chunks) < 10:
            for records in (await consumer.getmany(timeout_ms=200, max_records=3)).values():
                chunks.append([r.offset for r in records])
                positions.append(consumer.position(("t", 0)))
        assert chunks == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
        assert positions == [3, 6, 9, 10]
    finally:
        await consumer.stop()


async def test_no_partition_is_fetched_before_its_start_is_known():
    # A partition fetched from a placeholder position while its start was being looked up had its
    # records served, then dropped by the seek that followed, and served (and metered) again.
    class _SlowOffsets(_Client):
        async def list_offset(self, topic: str, partition: int, timestamp: int) -> tuple[int, int]:
            await asyncio.sleep(0.05)  # the broker takes its time to answer
            return 5, -1

    async def answer(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        return m.FetchResponse(partitions=[
            m.FetchPartitionResult(topic="t", partition=part.partition, high_watermark=7,
                                   records=_batch(part.fetch_offset, [b"x", b"y"]) if part.fetch_offset == 5 else b"")
            for part in request.partitions])

    connection = _Connection(answer)
    client = _SlowOffsets({("t", 0): 1, ("t", 1): 1}, {1: connection})
    consumer = Consumer(client, auto_offset_reset="earliest")
    await consumer.start()
    try:
        await consumer.assign([("t", 0), ("t", 1)], start="earliest")
        assert len(await _received(consumer, 4)) == 4
        assert connection.requests
        assert all(part.fetch_offset >= 5 for request in connection.requests for part in request.partitions)
    finally:
        await consumer.stop()


async def test_the_next_fetch_goes_out_on_the_turn_that_hands_the_records_over():
    # A record that arrives while the consumer is between fetches waits for the next one: the
    # fetch after an answer is written no later than the loop turn getmany returns on.
    answers: list[asyncio.Future] = []

    async def answer(request: m.FetchRequest, nth: int) -> m.FetchResponse:
        answers.append(asyncio.get_running_loop().create_future())
        return await answers[-1]

    connection = _Connection(answer)
    consumer = Consumer(_Client({("t", 0): 1}, {1: connection}))
    await consumer.start()
    try:
        await consumer.assign([("t", 0)], start=0)
        assert await _eventually(lambda: len(connection.requests) == 1)
        waiting = asyncio.ensure_future(consumer.getmany(timeout_ms=1000))
        await asyncio.sleep(0)
        answers[0].set_result(m.FetchResponse(partitions=[
            m.FetchPartitionResult(topic="t", partition=0, high_watermark=1, records=_batch(0, [b"x"]))]))
        records = await waiting
        assert [r.value for r in records[("t", 0)]] == [b"x"]
        await asyncio.sleep(0)
        assert len(connection.requests) == 2
        assert connection.requests[1].partitions[0].fetch_offset == 1
    finally:
        await consumer.stop()


async def test_every_answer_of_a_streaming_fetch_is_kept_and_the_next_fetch_starts_after_the_last():
    class _Streaming(_Connection):
        """Answers the first fetch three times (two early answers, then the last), as a broker's stream does."""

        async def request(self, api, request, timeout_s, on_answer=None):
            self.requests.append(request)
            await asyncio.sleep(0)
            if len(self.requests) > 1:
                await asyncio.sleep(0.05)
                return m.FetchResponse(partitions=[m.FetchPartitionResult(topic="t", partition=0, high_watermark=3)])
            for offset, more in ((0, True), (1, True), (2, False)):
                response = m.FetchResponse(more=more, partitions=[m.FetchPartitionResult(
                    topic="t", partition=0, high_watermark=offset + 1, records=_batch(offset, [b"v%d" % offset]))])
                on_answer(response)
                await asyncio.sleep(0.01)
            return response

    connection = _Streaming(None)
    consumer = Consumer(_Client({("t", 0): 1}, {1: connection}), fetch_answers_max=7, buffer_bytes_max=1 << 20)
    await consumer.assign([("t", 0)], start=0)
    await consumer.start()
    try:
        assert await _received(consumer, 3) == [b"v0", b"v1", b"v2"]
        assert await _eventually(lambda: len(connection.requests) >= 2)
        first, second = connection.requests[:2]
        assert first.answers_max == 7 and first.max_bytes == 1 << 20  # its answers fit the buffer's room
        assert second.partitions[0].fetch_offset == 3
    finally:
        await consumer.stop()
