"""A running broker compacts cleanup.policy=compact topics in the background (issue 4, part 3)."""


from tests.harness.waiting import eventually
from tideway.native import Consumer, Producer, TidewayClient


async def test_consumers_see_the_latest_value_per_key_after_background_compaction(broker_factory):
    broker = broker_factory(extra_args=["--log-cleaner-interval-ms", "200"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("profiles", configs={"cleanup.policy": "compact", "segment.bytes": "4096"})
        latest = {}
        async with Producer(client, linger_ms=0, batch_size_bytes=512) as producer:
            for i in range(2000):
                key = b"user-%d" % (i % 40)
                latest[key] = b"profile v%d" % i
                await producer.send("profiles", latest[key], key=key)
            await producer.flush()
        await eventually(lambda: "compacted profiles-0" in broker.log_text(), 30, "the cleaner compacting profiles-0")
        consumer = Consumer(client)
        await consumer.start()
        await consumer.assign([("profiles", 0)], start="earliest")
        seen, records = {}, 0
        while consumer.position(("profiles", 0)) < 2000:
            for batch in (await consumer.getmany(timeout_ms=2000)).values():
                for record in batch:
                    seen[record.key] = record.value
                    records += 1
        await consumer.stop()
    assert seen == latest  # the latest value of every key, read across the gaps
    assert records < 2000  # older values are gone
