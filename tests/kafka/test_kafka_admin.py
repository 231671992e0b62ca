"""Kafka's admin APIs with clients nobody here wrote (confluent-kafka's AdminClient, kafka-python's KafkaAdminClient)
against a 3-broker deployment and a tenant's key: a topic created over Kafka is the tenant's queue (the REST API
shows it with its settings), the plan's quotas refuse what they refuse over REST and nothing is created then,
partitions grow, configs describe, groups list and describe with their members, topics delete; a key without the
manage scope creates nothing; OffsetForLeaderEpoch answers from the leader's epochs.
"""

from __future__ import annotations

import pytest
from confluent_kafka import (
    OFFSET_END,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KafkaPythonNewTopic
from kio.index import load_request_schema as load

from tests.harness.waiting import wait_until
from tests.kafka.clients import confluent_config, kafka_python_config
from tests.kafka.raw import RawKafka, nested

pytestmark = pytest.mark.timeout(300)


def _outcome(futures: dict) -> dict:
    """Each future's KafkaError code, or None for success."""
    out = {}
    for name, future in futures.items():
        try:
            future.result(timeout=60)
            out[name] = None
        except KafkaException as exc:
            out[name] = exc.args[0].code()
    return out


def _queue(plane, key: str, name: str):
    with plane.client(key) as api:
        return api.get(f"/api/v1/queues/{name}")


def test_admin_client_creates_grows_describes_and_deletes_the_tenants_queues(plane):
    _slug, key = plane.create_tenant(plan="free")  # 5 queues, 10 partitions, 7 days' retention
    bootstrap = plane.deployment.kafka_bootstrap
    admin = AdminClient(confluent_config(bootstrap, key))
    name = plane.unique("kafka-made")

    created = _outcome(admin.create_topics([NewTopic(name, num_partitions=3, replication_factor=3,
                                                     config={"retention.ms": "3600000", "cleanup.policy": "compact"})]))
    assert created == {name: None}
    queue = _queue(plane, key, name).json()
    assert (queue["mode"], queue["partitions"], queue["replication_factor"], queue["retention_ms"],
            queue["compaction"]) == ("stream", 3, 3, 3600000, True)

    # The plan's quotas, as over REST: 3 + 8 partitions > 10; nothing is created.
    too_many = plane.unique("too-many")
    assert _outcome(admin.create_topics([NewTopic(too_many, num_partitions=8)])) == {
        too_many: KafkaError.POLICY_VIOLATION}
    assert _queue(plane, key, too_many).status_code == 404
    forever = plane.unique("forever")
    assert _outcome(admin.create_topics([NewTopic(forever, num_partitions=1, config={"retention.ms": "-1"})])) == {
        forever: KafkaError.INVALID_CONFIG}
    # What a Tideway queue does not take, and what exists, and validate_only.
    odd = plane.unique("odd")
    assert _outcome(admin.create_topics([NewTopic(odd, num_partitions=1, config={"segment.jitter.ms": "5"})])) == {
        odd: KafkaError.INVALID_CONFIG}
    assert _outcome(admin.create_topics([NewTopic(name, num_partitions=1)])) == {name: KafkaError.TOPIC_ALREADY_EXISTS}
    assert _outcome(admin.create_topics([NewTopic("t1.orders", num_partitions=1)])) == {
        "t1.orders": KafkaError.TOPIC_AUTHORIZATION_FAILED}
    dry = plane.unique("dry")
    assert _outcome(admin.create_topics([NewTopic(dry, num_partitions=2)], validate_only=True)) == {dry: None}
    assert _queue(plane, key, dry).status_code == 404
    for missing in (too_many, forever, odd, dry):
        assert missing not in admin.list_topics(timeout=30).topics

    # The topic is usable at once by Kafka clients.
    producer = Producer(confluent_config(bootstrap, key))
    for i in range(30):
        producer.produce(name, key=b"k%d" % (i % 5), value=b"v%d" % i)
    assert producer.flush(30) == 0

    # Partitions grow, within the quota (3 -> 6), not past it (-> 11), never shrink.
    assert _outcome(admin.create_partitions([NewPartitions(name, 6)])) == {name: None}
    assert _queue(plane, key, name).json()["partitions"] == 6
    wait_until(lambda: len(admin.list_topics(name, timeout=30).topics[name].partitions) == 6, 30,
               "the brokers to know 6 partitions")
    assert _outcome(admin.create_partitions([NewPartitions(name, 11)])) == {name: KafkaError.POLICY_VIOLATION}
    assert _outcome(admin.create_partitions([NewPartitions(name, 2)])) == {name: KafkaError.INVALID_PARTITIONS}
    assert _queue(plane, key, name).json()["partitions"] == 6

    # DescribeConfigs: the topic's settings as the brokers hold them.
    [described] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, name)]).values()
    configs = described.result(timeout=30)
    assert configs["retention.ms"].value == "3600000"
    assert configs["cleanup.policy"].value == "compact,delete"

    # A consumer group: listed and described with its member and assignment.
    group = plane.unique("admin-group")
    consumer = Consumer(confluent_config(bootstrap, key, **{"group.id": group, "auto.offset.reset": "earliest"}))
    consumer.subscribe([name])
    read = 0
    try:
        def consumed_all() -> bool:
            nonlocal read
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                read += 1
            return read >= 30
        wait_until(consumed_all, 60, "the group to read the 30 messages", interval_s=0)
        consumer.commit(asynchronous=False)
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        [description] = admin.describe_consumer_groups([group]).values()
        state = description.result(timeout=30)
        assert state.state.name == "STABLE" and len(state.members) == 1
        assigned = {tp.partition for tp in state.members[0].assignment.topic_partitions}
        assert assigned == set(range(6))
    finally:
        consumer.close()

    # DeleteTopics: the queue is gone from REST and from Kafka's metadata.
    assert _outcome(admin.delete_topics([name])) == {name: None}
    assert _queue(plane, key, name).status_code == 404
    assert _outcome(admin.delete_topics([name])) == {name: KafkaError.UNKNOWN_TOPIC_OR_PART}


def test_kafka_python_admin_and_a_key_without_the_manage_scope(plane):
    _slug, key = plane.create_tenant(plan="team")
    bootstrap = plane.deployment.kafka_bootstrap
    admin = KafkaAdminClient(**kafka_python_config(bootstrap, key))
    try:
        name = plane.unique("kp-made")
        admin.create_topics([KafkaPythonNewTopic(name, num_partitions=2, replication_factor=3)])
        assert _queue(plane, key, name).json()["partitions"] == 2
        cluster = admin.describe_cluster()
        assert len(cluster["brokers"]) == 3
        assert {f"{b['host']}:{b['port']}" for b in cluster["brokers"]} == set(bootstrap.split(","))
        admin.delete_topics([name])
        assert _queue(plane, key, name).status_code == 404
    finally:
        admin.close()

    with plane.client(key) as api:
        limited = api.post("/api/v1/keys/", json={"name": "no-manage", "scopes": ["produce", "consume"]})
        assert limited.status_code == 201, limited.text
        limited_key = limited.json()["key"]
    refused = plane.unique("refused")
    admin = AdminClient(confluent_config(bootstrap, limited_key))
    assert _outcome(admin.create_topics([NewTopic(refused, num_partitions=1)])) == {
        refused: KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert _queue(plane, key, refused).status_code == 404


def test_offset_for_leader_epoch_answers_from_the_leaders_epochs(plane):
    _slug, key = plane.create_tenant(plan="team")
    bootstrap = plane.deployment.kafka_bootstrap
    name = plane.unique("epochs")
    admin = AdminClient(confluent_config(bootstrap, key))
    assert _outcome(admin.create_topics([NewTopic(name, num_partitions=1, replication_factor=3)])) == {name: None}
    producer = Producer(confluent_config(bootstrap, key))
    for i in range(10):
        producer.produce(name, value=b"%d" % i, partition=0)
    assert producer.flush(30) == 0
    metadata = admin.list_topics(name, timeout=30)
    leader = metadata.topics[name].partitions[0].leader
    address = f"{metadata.brokers[leader].host}:{metadata.brokers[leader].port}"
    request_type = load(23, 4)
    topic_type, partition_type = nested(request_type, "topics"), nested(request_type, "topics", "partitions")
    with RawKafka(address, key) as kafka:
        def ask(current: int, epoch: int):
            answer = kafka.request(23, 4, replica_id=-1, topics=(topic_type(topic=name, partitions=(
                partition_type(partition=0, current_leader_epoch=current, leader_epoch=epoch),)),))
            return answer.topics[0].partitions[0]
        latest = ask(-1, 1 << 20)  # a later epoch than any: the latest epoch and the log's end
        assert latest.error_code == 0 and latest.end_offset == 10 and latest.leader_epoch >= 0
        assert ask(latest.leader_epoch, latest.leader_epoch).end_offset == 10
        assert ask(latest.leader_epoch + 1, 0).error_code == 75  # UNKNOWN_LEADER_EPOCH: newer than the leader's
        if latest.leader_epoch > 0:
            assert ask(latest.leader_epoch - 1, 0).error_code == 74  # FENCED_LEADER_EPOCH


def test_delete_records_with_the_admin_client_moves_each_partitions_start(plane):
    """AdminClient.delete_records (Kafka's DeleteRecords, what kafka-delete-records.sh sends): each partition's
    start moves for every client, a consumer from the earliest offset reads only what is left, and a key
    without the manage scope deletes nothing."""
    _slug, key = plane.create_tenant(plan="team")
    bootstrap = plane.deployment.kafka_bootstrap
    admin = AdminClient(confluent_config(bootstrap, key))
    name = plane.unique("trimmed")
    assert _outcome(admin.create_topics([NewTopic(name, num_partitions=2, replication_factor=3)])) == {name: None}
    producer = Producer(confluent_config(bootstrap, key))
    for i in range(20):
        producer.produce(name, value=b"v%d" % i, partition=i % 2)
    assert producer.flush(30) == 0

    with plane.client(key) as api:
        limited = api.post("/api/v1/keys/", json={"name": "no-manage", "scopes": ["produce", "consume"]})
        assert limited.status_code == 201, limited.text
    refused = AdminClient(confluent_config(bootstrap, limited.json()["key"]))
    [future] = refused.delete_records([TopicPartition(name, 0, 5)], request_timeout=30).values()
    with pytest.raises(KafkaException) as raised:
        future.result(timeout=60)
    assert raised.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    futures = admin.delete_records([TopicPartition(name, 0, 4), TopicPartition(name, 1, OFFSET_END)],
                                   request_timeout=30)
    lows = {tp.partition: future.result(timeout=60).low_watermark for tp, future in futures.items()}
    assert lows == {0: 4, 1: 10}  # OFFSET_END (-1): everything, up to the high watermark
    [past] = admin.delete_records([TopicPartition(name, 0, 99)], request_timeout=30).values()
    with pytest.raises(KafkaException) as raised:
        past.result(timeout=60)
    assert raised.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE

    consumer = Consumer(confluent_config(bootstrap, key, **{"group.id": plane.unique("after"),
                                                           "auto.offset.reset": "earliest"}))
    consumer.subscribe([name])
    values = []
    try:
        def read_what_is_left() -> bool:
            message = consumer.poll(1)
            if message is not None and message.error() is None:
                values.append(message.value())
            return len(values) >= 6
        wait_until(read_what_is_left, 60, "the 6 records left", interval_s=0)
        assert consumer.poll(2) is None
    finally:
        consumer.close()
    assert sorted(values) == sorted(b"v%d" % i for i in range(8, 20, 2))  # partition 0 from offset 4: v8, v10, ...
