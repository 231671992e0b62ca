"""Retention in a running broker deletes whole segments; reads below the start are refused."""

import time

import pytest

from tests.harness.waiting import eventually
from tideway.native import Producer, TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey


async def test_retention_by_time_and_size_in_a_live_broker(broker_factory):
    broker = broker_factory(extra_args=["--retention-check-interval-ms", "200"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("by-time", configs={"retention.ms": "60000", "segment.bytes": "2048"})
        await client.create_topic("by-size", configs={"retention.bytes": "8192", "segment.bytes": "2048"})
        hour_ago = int(time.time() * 1000) - 3_600_000
        # Small batches, so the data spans many segments.
        async with Producer(client, linger_ms=0, batch_size_bytes=1000) as producer:
            for i in range(200):
                await producer.send("by-time", b"old %05d" % i + b"." * 40, timestamp_ms=hour_ago)
                await producer.send("by-size", b"any %05d" % i + b"." * 40)
            await producer.flush()
            fresh = await producer.send_and_wait("by-time", b"fresh")

        async def expired() -> bool:
            (topic,) = await client.describe_topics(["by-time"])
            return topic.partitions[0].log_start_offset > 0

        await eventually(expired, 20, "the oldest segment of by-time deleted", interval_s=0.1)
        (by_time,) = await client.describe_topics(["by-time"])
        assert by_time.partitions[0].log_start_offset <= fresh.offset
        (by_size,) = await client.describe_topics(["by-size"])
        assert by_size.partitions[0].log_start_offset > 0
        assert 8192 <= by_size.partitions[0].size_bytes < 8192 + 2048 + 200

        connection = await client.connection(1)
        response = await connection.request(
            ApiKey.FETCH, m.FetchRequest(max_wait_ms=0, partitions=[m.FetchPartition(topic="by-time", partition=0, fetch_offset=0)])
        )
        assert response.partitions[0].error_code == errors.OffsetOutOfRangeError.errno
        assert "outside" in response.partitions[0].error_message
        assert "retention: deleting segment" in broker.log_text()
        with pytest.raises(errors.OffsetOutOfRangeError):
            raise errors.error_for_code(response.partitions[0].error_code, response.partitions[0].error_message)
