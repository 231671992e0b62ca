"""A broker process killed or stopped keeps every acknowledged message (issue 2)."""

import asyncio
import random
import signal
import time

from tideway.native import Consumer, Producer, TidewayClient
from tideway.protocol import errors


async def consume_all(bootstrap: str, topic: str, partitions: int, expected_total: int, timeout_s: float = 60) -> dict[int, list[bytes]]:
    consumer = Consumer(bootstrap)
    await consumer.start()
    await consumer.assign([(topic, p) for p in range(partitions)], start="earliest")
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + timeout_s
    total = 0
    while time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=500)
        if not batch and total >= expected_total:
            break
        for (_topic, partition), records in batch.items():
            out[partition] += [r.value for r in records]
            total += len(records)
    await consumer.stop()
    return out


async def produce_values(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap, linger_ms=2) as producer:
        futures = [await producer.send(topic, v, key=v[-1:]) for v in values]
        for future in futures:
            await future


async def test_data_survives_sigterm_and_sigkill_restarts(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("durable", partitions=3)
    first = [b"first %d" % i for i in range(5000)]
    await produce_values(broker.bootstrap, "durable", first)
    assert broker.terminate() == 0
    assert "stopped cleanly" in broker.log_text()
    broker.restart()
    assert "clean shutdown" in broker.log_text()
    second = [b"second %d" % i for i in range(5000)]
    await produce_values(broker.bootstrap, "durable", second)
    broker.kill()
    broker.restart()
    assert "recovered after an unclean shutdown" in broker.log_text()
    got = await consume_all(broker.bootstrap, "durable", 3, 10_000)
    assert sorted(v for values in got.values() for v in values) == sorted(first + second)


async def test_flush_always_keeps_every_ack_through_repeated_sigkill(broker):
    """Kill -9 the broker mid-load, several rounds; every acked message is there, in order."""
    partitions = 3
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("acked", partitions=partitions, configs={"flush": "always", "segment.bytes": "65536"})
    rng = random.Random(20261122)
    acked: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    sequence = 0
    rounds = 5
    for round_number in range(rounds):
        producer = Producer(broker.bootstrap, acks=1, linger_ms=1, retries=0)
        await producer.start()
        stop = asyncio.Event()

        async def load(producer: Producer = producer, stop: asyncio.Event = stop, round_number: int = round_number) -> None:
            nonlocal sequence
            pending = []
            while not stop.is_set():
                for _ in range(200):
                    value = b"r%d-%08d" % (round_number, sequence)
                    sequence += 1
                    try:
                        pending.append((value, await producer.send("acked", value, key=value[-2:])))
                    except errors.TidewayError:
                        break
                await asyncio.sleep(0)
                done = [(v, f) for v, f in pending if f.done()]
                pending = [(v, f) for v, f in pending if not f.done()]
                for value, future in done:
                    if future.exception() is None:
                        acked[(await future).partition].append(value)
            await asyncio.wait_for(asyncio.gather(*(f for _, f in pending), return_exceptions=True), 30)
            for value, future in pending:
                if future.exception() is None:
                    acked[(await future).partition].append(value)

        task = asyncio.ensure_future(load())
        await asyncio.sleep(rng.uniform(0.3, 1.0))
        broker.kill()
        stop.set()
        await task
        await asyncio.wait_for(producer.stop(), 30)
        broker.restart()
    total_acked = sum(len(v) for v in acked.values())
    assert total_acked > 1000, "the load should have had acknowledged messages every round"
    stored = await consume_all(broker.bootstrap, "acked", partitions, total_acked)
    for p in range(partitions):
        stored_set = set(stored[p])
        missing = [v for v in acked[p] if v not in stored_set]
        assert not missing, f"partition {p} lost {len(missing)} acknowledged messages, e.g. {missing[:3]}"
        positions = {v: i for i, v in enumerate(stored[p])}
        # Acks of one partition may arrive out of send order (a request that also waits
        # for another partition's fsync answers later), so compare in send order.
        in_send_order = sorted(acked[p], key=lambda v: int(v.split(b"-")[1]))
        order = [positions[v] for v in in_send_order]
        assert order == sorted(order), f"partition {p} changed the order of acknowledged messages"
        assert len(stored[p]) == len(stored_set), f"partition {p} holds duplicates"


async def test_sigstop_pauses_without_losing_data(broker):
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("paused")
    values = [b"v%d" % i for i in range(1000)]
    await produce_values(broker.bootstrap, "paused", values[:500])
    broker.signal(signal.SIGSTOP)
    producing = asyncio.ensure_future(produce_values(broker.bootstrap, "paused", values[500:]))
    await asyncio.sleep(1.0)
    assert not producing.done()  # nothing acknowledged while the broker is frozen
    broker.signal(signal.SIGCONT)
    await asyncio.wait_for(producing, 30)
    got = await consume_all(broker.bootstrap, "paused", 1, 1000)
    assert got[0] == values
