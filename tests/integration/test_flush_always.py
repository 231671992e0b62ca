"""A `flush: always` topic under concurrent producers (issue 15: the broker locked up).

Four producers (acks=1) and a consumer on one broker: every acknowledgement
arrives, the consumer reads every record, the broker answers metadata in the
middle of it all, and it stops cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio

from tideway.native import Consumer, Producer, TidewayClient

PRODUCERS = 4
MESSAGES = 3_000  # each


def test_concurrent_producers_on_a_flush_always_topic(broker):
    async def run() -> list[bytes]:
        async with TidewayClient(broker.bootstrap) as client:
            await client.create_topic("durable", partitions=2, configs={"flush": "always"})
            consumer = Consumer(client)
            await consumer.start()
            await consumer.assign([("durable", 0), ("durable", 1)], start="earliest")
            read: list[bytes] = []

            async def produce(number: int) -> int:
                async with Producer(broker.bootstrap, acks=1, linger_ms=0) as producer:
                    futures = [await producer.send("durable", b"%d-%d" % (number, i)) for i in range(MESSAGES)]
                    await producer.flush()
                    return sum(1 for future in futures if future.exception() is None)

            async def consume() -> None:
                while len(read) < PRODUCERS * MESSAGES:
                    batch = await consumer.getmany(timeout_ms=10_000)
                    assert batch, f"the consumer stalled at {len(read)} records"
                    read.extend(r.value for records in batch.values() for r in records)

            producing = asyncio.gather(*(produce(n) for n in range(PRODUCERS)))
            reading = asyncio.ensure_future(consume())
            await asyncio.sleep(0.5)
            async with TidewayClient(broker.bootstrap, metadata_timeout_ms=5_000) as other:  # still answering
                assert "durable" in await other.list_topics()
            acknowledged = await asyncio.wait_for(producing, 120)
            assert acknowledged == [MESSAGES] * PRODUCERS
            await asyncio.wait_for(reading, 120)
            await consumer.stop()
            return read

    values = asyncio.run(run())
    assert sorted(values) == sorted(b"%d-%d" % (n, i) for n in range(PRODUCERS) for i in range(MESSAGES))
    assert broker.terminate() == 0
