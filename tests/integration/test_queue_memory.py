"""A queue group's memory on the broker: bounded by its window, given back, and idle groups unloaded."""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from tests.harness.processes import free_port
from tests.harness.waiting import eventually
from tideway.native import Producer, TidewayClient
from tideway.native.group import describe_group
from tideway.native.queue import QueueConsumer

pytestmark = pytest.mark.timeout(300)

MESSAGES = 20_000
PARTITIONS = 4
GROUPS = 100


def _rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _gauge(metrics_port: int, name: str, labels: str = "") -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    found = re.search(rf"^{re.escape(name + labels)} (\S+)$", text, re.M)
    assert found, f"{name}{labels} not in the broker's metrics"
    return float(found.group(1))


async def _process_all(bootstrap: str, group: str) -> int:
    """Receive and accept every message of the queue in ``group``; how many."""
    done = 0
    async with QueueConsumer(bootstrap, group, "jobs") as queue:
        while done < MESSAGES:
            messages = await queue.receive(1000, wait_ms=1000)
            assert messages, f"{group} got nothing after {done} messages"
            await queue.ack(messages)
            done += len(messages)
    return done


async def test_hundred_queue_groups_leave_the_broker_memory_where_it_started(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}", "--queue-idle-unload-ms", "2000"])
    pid = broker.process.pid
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("jobs", partitions=PARTITIONS)
    async with Producer(broker.bootstrap, acks=1, linger_ms=5) as producer:
        for i in range(MESSAGES):
            await producer.send("jobs", i.to_bytes(4, "big") * 25, partition=i % PARTITIONS)
        await producer.flush()
    await asyncio.sleep(1)
    started_mib = _rss_mib(pid)

    # Ten groups at a time, each reading the whole queue: a window of up to 5,000 records per partition.
    for first in range(0, GROUPS, 10):
        done = await asyncio.gather(*(_process_all(broker.bootstrap, f"g{n}") for n in range(first, first + 10)))
        assert done == [MESSAGES] * 10
    after_mib = _rss_mib(pid)
    # Before windows gave their tables back: 44 -> 216 MiB (about 1.7 MiB kept per group).
    assert after_mib - started_mib < 100, f"RSS {started_mib:.0f} -> {after_mib:.0f} MiB after {GROUPS} groups"

    # Idle for 2 s with nothing in flight: every share-partition leaves memory; the state log keeps it.
    await eventually(lambda: _gauge(metrics_port, "tideway_queue_share_partitions", '{state="loaded"}') == 0, 30,
                    "idle share-partitions to unload")
    assert _gauge(metrics_port, "tideway_queue_share_partitions", '{state="unloaded"}') == GROUPS * PARTITIONS
    assert _gauge(metrics_port, "tideway_queue_window_records") == 0
    async with TidewayClient(broker.bootstrap) as client:
        description = await describe_group(client, "g7")
    assert [(p.partition, p.start_offset, p.in_flight) for p in description.share_partitions] == [
        (p, MESSAGES // PARTITIONS, 0) for p in range(PARTITIONS)]
    assert _gauge(metrics_port, "tideway_queue_share_partitions", '{state="loaded"}') == 0  # describing loads nothing

    # Reloaded on demand: nothing is delivered again, and new messages are.
    async with Producer(broker.bootstrap, acks=1) as producer:
        await (await producer.send("jobs", b"late", partition=2))
    async with QueueConsumer(broker.bootstrap, "g7", "jobs") as queue:
        messages = await queue.receive(100, wait_ms=2000)
        assert [(m.partition, m.offset, m.value) for m in messages] == [(2, MESSAGES // PARTITIONS, b"late")]
        await queue.ack(messages)
    assert _gauge(metrics_port, "tideway_queue_share_partitions", '{state="loaded"}') == PARTITIONS


async def test_an_unloaded_group_keeps_delivery_counts_and_released_messages(broker_factory):
    metrics_port = free_port()
    broker = broker_factory(extra_args=["--metrics-listen", f"127.0.0.1:{metrics_port}", "--queue-idle-unload-ms", "1000"])
    async with TidewayClient(broker.bootstrap) as client:
        await client.create_topic("jobs", partitions=1, configs={"queue.retry.backoff.ms": "0"})
    async with Producer(broker.bootstrap, acks="all") as producer:
        for value in (b"a", b"b", b"c"):
            await (await producer.send("jobs", value))
    async with QueueConsumer(broker.bootstrap, "workers", "jobs") as queue:
        first = await queue.receive(3, wait_ms=2000)
        assert [m.value for m in first] == [b"a", b"b", b"c"]
        await queue.ack([first[0]])
        await queue.nack([first[1]], delay_ms=0)  # back to available, delivered once
        await queue.reject([first[2]], error="bad")  # dead-lettered

    await eventually(lambda: _gauge(metrics_port, "tideway_queue_share_partitions", '{state="unloaded"}') == 1, 30,
                    "the idle share-partition to unload")
    async with TidewayClient(broker.bootstrap) as client:
        description = await describe_group(client, "workers")
    [share] = description.share_partitions
    assert (share.start_offset, share.available, share.in_flight) == (1, 1, 0)

    async with QueueConsumer(broker.bootstrap, "workers", "jobs") as queue:
        again = await queue.receive(3, wait_ms=2000)
        assert [(m.value, m.delivery_count) for m in again] == [(b"b", 2)]
        await queue.ack(again)
        assert await queue.receive(3, wait_ms=300) == []


def _offsets_topic_bytes(data_dir) -> int:
    return sum(path.stat().st_size for path in data_dir.glob("__consumer_offsets-*/*.log"))


async def test_deleting_a_queue_leaves_only_what_live_groups_need_in_the_offsets_topic(broker_factory):
    """``__consumer_offsets`` follows the live groups: a deleted queue's groups are tombstoned and compacted away."""
    broker = broker_factory(extra_args=["--log-cleaner-interval-ms", "300"])
    async with TidewayClient(broker.bootstrap) as client:
        for topic in ("doomed", "kept"):
            await client.create_topic(topic, partitions=4)
    async with Producer(broker.bootstrap, acks=1, linger_ms=5) as producer:
        for i in range(2000):
            await producer.send("doomed", b"x" * 100, partition=i % 4)
        for i in range(40):
            await producer.send("kept", b"k%d" % i, partition=i % 4)
        await producer.flush()

    async def process(group: str, topic: str, count: int) -> None:
        async with QueueConsumer(broker.bootstrap, group, topic) as queue:
            done = 0
            while done < count:
                messages = await queue.receive(100, wait_ms=1000)
                assert messages
                await asyncio.gather(*(queue.ack([m]) for m in messages))  # each on its own: many state writes
                done += len(messages)

    await asyncio.gather(*(process(f"g{n}", "doomed", 2000) for n in range(20)), process("survivor", "kept", 40))
    grown = _offsets_topic_bytes(broker.data_dir)
    async with TidewayClient(broker.bootstrap) as client:
        # Roll the offsets topic at once (10 minutes by default), so the cleaner may drop what the tombstones replace.
        await client.alter_configs("__consumer_offsets", set={"segment.ms": "1000"})
        await asyncio.sleep(1.5)
        await client.delete_topic("doomed")
    await eventually(lambda: _offsets_topic_bytes(broker.data_dir) < grown / 2, 30,
                    f"the offsets topic to shrink from {grown} bytes")
    assert "forgot" in broker.log_text()

    # The live group's state is intact, also after a restart that reads it back from the compacted topic.
    assert broker.terminate() == 0
    broker.restart()
    async with TidewayClient(broker.bootstrap) as client:
        description = await describe_group(client, "survivor")
    assert [(p.partition, p.start_offset) for p in description.share_partitions] == [(p, 10) for p in range(4)]
    async with QueueConsumer(broker.bootstrap, "survivor", "kept") as queue:
        assert await queue.receive(10, wait_ms=300) == []
