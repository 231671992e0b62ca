"""A damaged replica never serves a batch failing its CRC, and is repaired from a healthy one (issue 15).

Real processes: a controller and two brokers, a topic with two replicas. The
damage is one byte flipped inside a batch's records in a segment file, where
only the CRC can tell.
"""

import signal
import time

import pytest

from tideway.native import Consumer, Producer, TidewayClient
from tideway.record.batch import BATCH_HEADER_BYTES, iter_batches

# One database: the subject is the data plane; the controller's store on both databases is
# tests/fault/test_cluster_failover.py's.
pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


TOPIC = "ledger"


async def create_topic(deployment) -> None:
    async with TidewayClient(deployment.bootstrap) as client:
        await client.create_topic(TOPIC, partitions=1, replication_factor=2,
                                  configs={"min.insync.replicas": "1", "segment.bytes": str(64 << 10)})
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, what="topic created")


async def produce(bootstrap: str, count: int) -> list[bytes]:
    """``count`` acknowledged 200-byte records in batches of 50: about ten 64 KiB segments."""
    acked = []
    async with Producer(bootstrap, acks="all", linger_ms=2) as producer:
        for start in range(0, count, 50):
            values = [b"record-%06d-" % i + b"x" * 186 for i in range(start, start + 50)]
            futures = [await producer.send(TOPIC, value, partition=0) for value in values]
            for value, future in zip(values, futures, strict=True):
                await future
                acked.append(value)
    return acked


async def consume_all(bootstrap: str, expected: int) -> list[bytes]:
    """Everything from the start, with the client checking every batch's CRC (a failure raises)."""
    consumer = Consumer(bootstrap, check_crcs=True)
    await consumer.start()
    await consumer.assign([(TOPIC, 0)], start="earliest")
    values: list[bytes] = []
    for _ in range(400):
        batch = await consumer.getmany(timeout_ms=250)
        values += [r.value for records in batch.values() for r in records]
        if len(values) >= expected:
            break
    await consumer.stop()
    return values


def flip_byte_mid_segment(directory) -> None:
    """Flip one byte inside the records of a batch in the middle of the newest non-empty segment."""
    segments = sorted(p for p in directory.glob("*.log") if p.stat().st_size > 0)
    path = segments[-1]
    data = path.read_bytes()
    batches = list(iter_batches(data))
    position, _base, size = batches[len(batches) // 2]
    target = position + BATCH_HEADER_BYTES + (size - BATCH_HEADER_BYTES) // 2
    with open(path, "r+b") as f:
        f.seek(target)
        f.write(bytes([data[target] ^ 0x01]))


async def two_replicas_holding_records(deployment_factory):
    """(deployment, acknowledged values, leader id, follower id) of a 2-broker cluster with 3,000 records."""
    deployment = deployment_factory(brokers=2)
    await create_topic(deployment)
    acked = await produce(deployment.bootstrap, 3000)
    leader_id = deployment.partition(await deployment.describe(), TOPIC, 0).leader
    return deployment, acked, leader_id, 3 - leader_id


async def test_a_corrupt_follower_restarted_cleanly_is_repaired_before_it_can_lead(deployment_factory):
    deployment, acked, leader_id, follower_id = await two_replicas_holding_records(deployment_factory)
    follower, leader = deployment.brokers[follower_id], deployment.brokers[leader_id]

    assert follower.terminate() == 0  # a clean shutdown: its files carry the clean-shutdown marker
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).isr == [leader_id], what="follower out of the ISR")
    flip_byte_mid_segment(follower.data_dir / f"{TOPIC}-0")
    follower.restart()
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, timeout_s=30,
                                what="the repaired follower back in the ISR")
    log_text = follower.log_text()
    assert "corrupt data from offset" in log_text and "repaired" in log_text

    leader.kill()  # SIGKILL: the repaired replica must lead now
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).leader == follower_id, what="failover")
    values = await consume_all(follower.bootstrap, len(acked))
    assert values == acked  # every acknowledged record, intact, in order; a CRC failure would have raised


async def test_a_leader_refuses_its_corrupt_batch_and_hands_over_to_a_healthy_replica(deployment_factory):
    deployment, acked, leader_id, follower_id = await two_replicas_holding_records(deployment_factory)
    leader = deployment.brokers[leader_id]

    # Damage the running leader's file: its next read of that batch sees it.
    leader.signal(signal.SIGSTOP)
    try:
        flip_byte_mid_segment(leader.data_dir / f"{TOPIC}-0")
    finally:
        leader.signal(signal.SIGCONT)
    values = await consume_all(deployment.bootstrap, len(acked))
    assert values == acked  # no batch failing its CRC reached the consumer

    await deployment.wait_until(
        lambda s: deployment.partition(s, TOPIC, 0).leader == follower_id, what="leadership moved off the damaged replica")
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, timeout_s=30,
                                what="the damaged replica repaired and back in the ISR")
    assert "fails its CRC" in leader.log_text() or "CRC mismatch" in leader.log_text()
    assert "repaired" in leader.log_text()


# -- damage outside the CRC (issue 40) ------------------------------------------------------------
# A batch's base offset is not covered by its CRC. A byte flipped there stopped consumers at the batch with no
# error, no log line and no metric, and the replica was never repaired. The record count is covered: flipped,
# it is CRC damage. Both are flipped here, in two batches of the same segment.


def flip_header_bytes(directory) -> tuple[int, int]:
    """Flip a bit of one batch's base offset and one of a later batch's record count, in the middle of the newest
    non-empty segment; return (the first damaged batch's offset, the second's)."""
    segments = sorted(p for p in directory.glob("*.log") if p.stat().st_size > 0)
    path = segments[-1]
    data = path.read_bytes()
    batches = list(iter_batches(data))
    first, second = batches[len(batches) // 2], batches[len(batches) // 2 + 2]
    with open(path, "r+b") as f:
        f.seek(first[0] + 5)  # baseOffset's sixth byte: the offset moves by 65,536
        f.write(bytes([data[first[0] + 5] ^ 0x01]))
        f.seek(second[0] + 60)  # recordCount's last byte
        f.write(bytes([data[second[0] + 60] ^ 0x04]))
    return first[1], second[1]


def corrupt_batches_counted(metrics_port: int) -> float:
    import urllib.request

    from tests.harness.processes import OPERATOR_KEY

    request = urllib.request.Request(f"http://127.0.0.1:{metrics_port}/metrics",
                                     headers={"Authorization": f"Bearer {OPERATOR_KEY}"})
    text = urllib.request.urlopen(request, timeout=5).read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith(f'tideway_corrupt_batches_total{{topic="{TOPIC}"}}'))


async def consume_all_timed(bootstrap: str, expected: int) -> tuple[list[bytes], float]:
    """Everything from the start (CRCs checked by the client too), and the longest wait for the next records."""
    consumer = Consumer(bootstrap, check_crcs=True)
    await consumer.start()
    await consumer.assign([(TOPIC, 0)], start="earliest")
    values: list[bytes] = []
    longest, last = 0.0, time.monotonic()
    deadline = last + 90
    while len(values) < expected and time.monotonic() < deadline:
        batch = await consumer.getmany(timeout_ms=250)
        if batch:
            now = time.monotonic()
            longest, last = max(longest, now - last), now
            values += [r.value for records in batch.values() for r in records]
    await consumer.stop()
    return values, longest


async def two_replicas_with_metrics(deployment_factory):
    from tests.harness.processes import free_port

    ports = {1: free_port(), 2: free_port()}
    deployment = deployment_factory(brokers=2, broker_args=lambda i: ["--metrics-listen", f"127.0.0.1:{ports[i]}"])
    await create_topic(deployment)
    acked = await produce(deployment.bootstrap, 3000)
    leader_id = deployment.partition(await deployment.describe(), TOPIC, 0).leader
    return deployment, acked, leader_id, 3 - leader_id, ports


async def test_a_follower_with_a_flipped_base_offset_and_record_count_is_repaired_before_it_can_lead(deployment_factory):
    deployment, acked, leader_id, follower_id, ports = await two_replicas_with_metrics(deployment_factory)
    follower, leader = deployment.brokers[follower_id], deployment.brokers[leader_id]
    assert follower.terminate() == 0
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).isr == [leader_id], what="follower out of the ISR")
    damaged, _ = flip_header_bytes(follower.data_dir / f"{TOPIC}-0")
    follower.restart()
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, timeout_s=30,
                                what="the repaired follower back in the ISR")
    log_text = follower.log_text()
    assert f"corrupt data from offset {damaged}" in log_text and "base offset" in log_text and "repaired" in log_text
    assert corrupt_batches_counted(ports[follower_id]) >= 1

    leader.kill()  # the repaired replica must lead now, and hold everything
    await deployment.wait_until(lambda s: deployment.partition(s, TOPIC, 0).leader == follower_id, what="failover")
    values, longest_wait_s = await consume_all_timed(follower.bootstrap, len(acked))
    assert values == acked


async def test_a_leader_with_a_flipped_base_offset_refuses_it_and_hands_over_without_stalling_readers(deployment_factory):
    deployment, acked, leader_id, follower_id, ports = await two_replicas_with_metrics(deployment_factory)
    leader = deployment.brokers[leader_id]
    leader.signal(signal.SIGSTOP)
    try:
        damaged, _ = flip_header_bytes(leader.data_dir / f"{TOPIC}-0")
    finally:
        leader.signal(signal.SIGCONT)
    values, longest_wait_s = await consume_all_timed(deployment.bootstrap, len(acked))
    assert values == acked  # every acknowledged record, in order, none damaged
    assert longest_wait_s < 10, f"the consumer waited {longest_wait_s:.1f} s for records"
    await deployment.wait_until(
        lambda s: deployment.partition(s, TOPIC, 0).leader == follower_id, what="leadership moved off the damaged replica")
    await deployment.wait_until(lambda s: len(deployment.partition(s, TOPIC, 0).isr) == 2, timeout_s=30,
                                what="the damaged replica repaired and back in the ISR")
    log_text = leader.log_text()
    assert f"corrupt data from offset {damaged}" in log_text and "base offset" in log_text and "repaired" in log_text
    assert corrupt_batches_counted(ports[leader_id]) >= 1
