"""Replication between real broker processes (issue 3, broker side).

The controller arrives in the control plane; here the test plays its part and
pushes CLUSTER_STATE to the brokers itself, exactly as the controller does:
to their internal listeners, proving the cluster secret.
"""

from pathlib import Path

import pytest

from tests.harness.processes import CLUSTER_SECRET_HEX
from tests.harness.waiting import eventually
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.conn import connect
from tideway.native.credentials import ClusterPeer
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

TOPIC = "rep"


class FakeController:
    """Pushes cluster state to brokers the way the controller does."""

    def __init__(self, brokers, epoch: int = 1) -> None:
        self.brokers = {b.broker_id: b for b in brokers}
        self.epoch = epoch
        self.topics = [m.TopicState(name=TOPIC, partitions=1, replication_factor=3, configs={"min.insync.replicas": "2"})]

    async def push(self, leader: int, leader_epoch: int, isr: list[int], *, partition_epoch: int | None = None, to=None) -> None:
        state = m.ClusterStateRequest(
            controller_id=0,
            controller_epoch=self.epoch,
            brokers=[m.BrokerInfo(node_id=i, host="127.0.0.1", port=b.port) for i, b in self.brokers.items()],
            internal_listeners=[m.ListenerAddress(node_id=i, host="127.0.0.1", port=b.internal_port) for i, b in self.brokers.items()],
            topics=self.topics,
            partitions=[
                m.PartitionState(
                    topic=TOPIC, partition=0, leader=leader, leader_epoch=leader_epoch,
                    partition_epoch=leader_epoch if partition_epoch is None else partition_epoch,
                    replicas=sorted(self.brokers), isr=isr,
                )
            ],
        )
        for broker_id in to or self.brokers:
            connection = await connect("127.0.0.1", self.brokers[broker_id].internal_port,
                                       credentials=ClusterPeer(bytes.fromhex(CLUSTER_SECRET_HEX), identity="test-controller"))
            try:
                await connection.request(ApiKey.CLUSTER_STATE, state)
            finally:
                connection.close()


def segment_bytes(data_dir: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted((data_dir / f"{TOPIC}-0").glob("*.log")))


async def describe(broker) -> m.PartitionDescription:
    async with TidewayClient(broker.bootstrap) as client:
        (topic,) = await client.describe_topics([TOPIC])
        return topic.partitions[0]


async def consume_values(bootstrap: str, count: int) -> list[bytes]:
    """The first ``count`` values of the partition, read from the earliest offset."""
    consumer = Consumer(bootstrap)
    await consumer.start()
    await consumer.assign([(TOPIC, 0)], start="earliest")
    got: list[bytes] = []
    while len(got) < count:
        batch = await consumer.getmany(timeout_ms=3000)
        assert batch, f"only {len(got)} of {count} values arrived"
        got += [r.value for records in batch.values() for r in records]
    await consumer.stop()
    return got


async def produce(bootstrap: str, values: list[bytes], acks) -> list[m.ProducePartitionResult]:
    async with Producer(bootstrap, acks=acks, linger_ms=1, retries=0) as producer:
        futures = [await producer.send(TOPIC, v) for v in values]
        return [await f for f in futures]


@pytest.fixture
def cluster(broker_factory):
    return [broker_factory(f"b{i}", broker_id=i) for i in (1, 2, 3)]


async def test_acks_all_replicates_to_every_isr_member_byte_for_byte(cluster):
    controller = FakeController(cluster)
    await controller.push(leader=1, leader_epoch=1, isr=[1, 2, 3])
    bootstrap = ",".join(b.bootstrap for b in cluster)
    values = [b"replicated %d" % i for i in range(3000)]
    acked = await produce(bootstrap, values, acks="all")
    assert [a.offset for a in acked] == list(range(3000))
    # acks=all: every ISR member had the records when they were acknowledged.
    for broker in cluster:
        assert (await describe(broker)).log_end_offset == 3000
    await eventually(lambda: _all_equal([segment_bytes(b.data_dir) for b in cluster]), 20, "every replica's bytes equal",
                     interval_s=0.05)
    async with TidewayClient(cluster[2].bootstrap) as client:  # metadata from a follower names the leader
        assert client.leader_for(TOPIC, 0) == 1 and client.topics[TOPIC][0].isr == [1, 2, 3]
    assert await consume_values(bootstrap, 3000) == values


async def _all_equal(items) -> bool:
    return all(item == items[0] for item in items)


async def test_acks_all_is_refused_when_the_isr_is_below_min_insync(cluster):
    controller = FakeController(cluster)
    await controller.push(leader=1, leader_epoch=1, isr=[1])
    with pytest.raises(errors.NotEnoughReplicasError):
        await produce(cluster[0].bootstrap, [b"refused"], acks="all")
    assert (await describe(cluster[0])).log_end_offset == 0  # refused before anything was written
    assert [r.offset for r in await produce(cluster[0].bootstrap, [b"acks=1 is fine"], acks=1)] == [0]
    await controller.push(leader=1, leader_epoch=1, isr=[1, 2], partition_epoch=2)
    assert [r.offset for r in await produce(cluster[0].bootstrap, [b"accepted again"], acks="all")] == [1]


async def test_a_returning_leader_truncates_its_unreplicated_tail(cluster):
    b1, b2, b3 = cluster
    controller = FakeController(cluster)
    await controller.push(leader=1, leader_epoch=1, isr=[1, 2, 3])
    bootstrap = ",".join(b.bootstrap for b in cluster)
    committed = [b"committed %d" % i for i in range(500)]
    await produce(bootstrap, committed, acks="all")
    # Followers down: the leader takes acks=1 writes nobody else gets. (SIGSTOP
    # would not do: a fetch answer already in their socket buffers still lands.)
    b2.kill()
    b3.kill()
    await produce(b1.bootstrap, [b"lost with the old leader %d" % i for i in range(200)], acks=1)
    assert (await describe(b1)).log_end_offset == 700
    b1.kill()
    b2.restart()
    b3.restart()
    # The controller elects broker 2 (in the ISR) with a new epoch.
    await controller.push(leader=2, leader_epoch=2, isr=[2, 3], to=[2, 3])
    after = [b"new leader %d" % i for i in range(300)]
    acked = await produce(",".join([b2.bootstrap, b3.bootstrap]), after, acks="all")
    assert acked[0].offset == 500  # the new leader continues after the committed records
    b1.restart()
    await controller.push(leader=2, leader_epoch=2, isr=[2, 3])

    async def caught_up() -> bool:
        return (await describe(b1)).log_end_offset == 800 == (await describe(b2)).log_end_offset

    await eventually(caught_up, 20, "the old leader truncated and caught up", interval_s=0.05)
    assert "truncating divergent records 500..699" in b1.log_text()
    assert segment_bytes(b1.data_dir) == segment_bytes(b2.data_dir) == segment_bytes(b3.data_dir)
    assert await consume_values(b2.bootstrap, 800) == committed + after


async def test_brokers_ignore_an_older_controller_epoch(cluster):
    controller = FakeController(cluster, epoch=5)
    await controller.push(leader=1, leader_epoch=1, isr=[1, 2, 3])
    stale = FakeController(cluster, epoch=4)
    with pytest.raises(errors.StaleControllerEpochError):
        await stale.push(leader=2, leader_epoch=9, isr=[2])
    async with TidewayClient(cluster[1].bootstrap) as client:
        assert client.leader_for(TOPIC, 0) == 1
