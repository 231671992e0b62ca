"""Kafka's admin APIs, as AdminClient, kcat and Kafka's own tools send them, each a translation onto the broker's
own requests through ``Router.call`` (the one authorizer, the tenant's names):

* CreateTopics, DeleteTopics, CreatePartitions: the broker's topic admin, which for a tenant's key the controller
  hands to the control plane's queue actions (``topics.tenant_admin``): the manage scope, the REST API's
  validation and the plan's quotas, exactly as ``POST /api/v1/queues``.
* DescribeConfigs: a topic's settings as the broker holds them (DESCRIBE_TOPICS).
* DescribeGroups, ListGroups: the broker's groups (DESCRIBE_GROUP, LIST_GROUPS) with the membership of the classic
  groups this coordinator holds for Kafka clients (``groups.ClassicGroups``).
* OffsetForLeaderEpoch: where a leader epoch ends (OFFSET_FOR_LEADER_EPOCH), for a consumer checking its position
  after a leader change.
* DescribeCluster: the brokers at their Kafka listeners (METADATA without topics).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from tideway_server.brokers.kafka.answers import (
    CLUSTER_ID,
    NO_THROTTLE,
    OPERATIONS_UNKNOWN,
    UNKNOWN_TOPIC_ID,
    build,
    item_type,
    kafka_code,
)
from tideway_server.brokers.kafka.groups import ClassicGroups, State
from tideway_server.brokers.server.connection import Session
from tideway_server.brokers.server.router import Router

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

__all__ = ["KafkaAdmin"]

# DescribeConfigs' vocabulary (Kafka's ConfigResource.Type and ConfigEntry.ConfigSource / ConfigType).
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
SOURCE_TOPIC = 1  # DYNAMIC_TOPIC_CONFIG: set for this topic
TYPE_STRING, TYPE_LONG, TYPE_BOOLEAN = 2, 5, 1
ENDPOINT_BROKERS = 1  # DescribeCluster v1: brokers' endpoints (not controllers')
CONSUMER_PROTOCOL = "consumer"


def _config_type(value: str) -> int:
    if value in ("true", "false"):
        return TYPE_BOOLEAN
    return TYPE_LONG if value.lstrip("-").isdigit() else TYPE_STRING


class KafkaAdmin:
    def __init__(self, router: Router, groups: ClassicGroups, *, broker_id: int) -> None:
        self._router = router
        self._groups = groups
        self._broker_id = broker_id
        self.handlers = {15: self.describe_groups, 16: self.list_groups, 42: self.delete_groups, 47: self.offset_delete,
                         19: self.create_topics,
                         20: self.delete_topics, 21: self.delete_records, 23: self.offset_for_leader_epoch, 32: self.describe_configs,
                         37: self.create_partitions, 60: self.describe_cluster}

    # -- topics ---------------------------------------------------------------------------------

    async def create_topics(self, request, response_type, session: Session):
        result_type = item_type(response_type, "topics")
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        native_topics = []
        for topic in request.topics:
            if topic.assignments:
                results[topic.name] = (ErrorCode.invalid_request, "replica assignments are the controller's: "
                                                                  "give a partition count and replication factor")
            else:
                native_topics.append(m.NewTopic(
                    name=topic.name, partitions=topic.num_partitions, replication_factor=topic.replication_factor,
                    configs={c.name: c.value for c in topic.configs if c.value is not None}))
        if native_topics:
            native = m.CreateTopicsRequest(topics=native_topics, validate_only=request.validate_only)
            try:
                answer: m.CreateTopicsResponse = await self._router.call(session, ApiKey.CREATE_TOPICS, native)
            except errors.BrokerError as exc:
                results.update({t.name: (kafka_code(exc.errno), exc.message) for t in native_topics})
            else:
                results.update({r.name: (kafka_code(r.error_code), r.error_message or None) for r in answer.topics})
        shapes = await self._shapes(session, [name for name, (code, _) in results.items() if code == ErrorCode.none])
        topics = []
        for topic in request.topics:
            code, message = results.get(topic.name, (ErrorCode.unknown_server_error, "no answer for this topic"))
            partitions, replication_factor = shapes.get(topic.name, (-1, -1))
            topics.append(build(result_type, name=topic.name, topic_id=UNKNOWN_TOPIC_ID, error_code=code,
                                error_message=message, topic_config_error_code=0, num_partitions=partitions,
                                replication_factor=replication_factor, configs=None))
        return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(topics))

    async def delete_records(self, request, response_type, session: Session):
        """Kafka's DeleteRecords (``kafka-delete-records.sh``, ``AdminClient.delete_records``): the native one, for
        the partitions this broker leads (others answer NOT_LEADER_OR_FOLLOWER, as Kafka's brokers do)."""
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(topic.name, p.partition_index, p.offset) for topic in request.topics for p in topic.partitions]
        timeout_ms = int(request.timeout.total_seconds() * 1000)
        native = m.DeleteRecordsRequest(timeout_ms=timeout_ms, partitions=[
            m.DeleteRecordsPartition(topic=name, partition=index, offset=offset) for name, index, offset in wanted])
        results = {}
        try:
            answer: m.DeleteRecordsResponse = await self._router.call(session, ApiKey.DELETE_RECORDS, native)
        except errors.BrokerError as exc:
            results = {(name, index): (kafka_code(exc.errno), -1) for name, index, _ in wanted}
        else:
            results = {(r.topic, r.partition): (kafka_code(r.error_code), r.low_watermark) for r in answer.partitions}
        by_topic: dict[str, list] = {}
        for name, index, _ in wanted:
            code, low = results.get((name, index), (ErrorCode.unknown_topic_or_partition, -1))
            by_topic.setdefault(name, []).append(build(partition_type, partition_index=index, low_watermark=low,
                                                       error_code=code))
        return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    async def _shapes(self, session: Session, names: list[str]) -> dict[str, tuple[int, int]]:
        """(partitions, replication factor) of each of ``names`` the broker knows."""
        if not names:
            return {}
        try:
            answer: m.MetadataResponse = await self._router.call(session, ApiKey.METADATA, m.MetadataRequest(topics=names))
        except errors.BrokerError:
            return {}
        return {t.name: (len(t.partitions), len(t.partitions[0].replicas) if t.partitions else -1)
                for t in answer.topics if not t.error_code}

    async def delete_topics(self, request, response_type, session: Session):
        result_type = item_type(response_type, "responses")
        names = [t.name for t in request.topics] if hasattr(request, "topics") else list(request.topic_names)
        results: dict[str, tuple[ErrorCode, str | None]] = {}
        wanted = [name for name in names if name is not None]
        if wanted:
            try:
                answer: m.DeleteTopicsResponse = await self._router.call(
                    session, ApiKey.DELETE_TOPICS, m.DeleteTopicsRequest(names=wanted))
            except errors.BrokerError as exc:
                results = {name: (kafka_code(exc.errno), exc.message) for name in wanted}
            else:
                results = {r.name: (kafka_code(r.error_code), r.error_message or None) for r in answer.topics}
        out = []
        for name in names:
            if name is None:  # v6 names a topic by id; Tideway's topics have none
                code, message = ErrorCode.unknown_topic_id, "topics are named by name here (they have no ids)"
            else:
                code, message = results.get(name, (ErrorCode.unknown_server_error, "no answer for this topic"))
            out.append(build(result_type, name=name, topic_id=UNKNOWN_TOPIC_ID, error_code=code, error_message=message))
        return build(response_type, throttle_time=NO_THROTTLE, responses=tuple(out))

    async def create_partitions(self, request, response_type, session: Session):
        result_type = item_type(response_type, "results")
        out = []
        for topic in request.topics:
            if topic.assignments:
                code, message = ErrorCode.invalid_request, "replica assignments are the controller's"
            else:
                native = m.CreatePartitionsRequest(topic=topic.name, count=topic.count,
                                                   validate_only=request.validate_only)
                try:
                    answer: m.CreatePartitionsResponse = await self._router.call(
                        session, ApiKey.CREATE_PARTITIONS, native)
                    code, message = kafka_code(answer.error_code), answer.error_message or None
                except errors.BrokerError as exc:
                    code, message = kafka_code(exc.errno), exc.message
            out.append(build(result_type, name=topic.name, error_code=code, error_message=message))
        return build(response_type, throttle_time=NO_THROTTLE, results=tuple(out))

    async def describe_configs(self, request, response_type, session: Session):
        result_type = item_type(response_type, "results")
        entry_type = item_type(result_type, "configs")
        topics = [r.resource_name for r in request.resources if r.resource_type == RESOURCE_TOPIC]
        described: dict[str, m.TopicDescription] = {}
        refused: errors.BrokerError | None = None
        if topics:
            try:
                answer: m.DescribeTopicsResponse = await self._router.call(
                    session, ApiKey.DESCRIBE_TOPICS, m.DescribeTopicsRequest(names=topics))
                described = {t.name: t for t in answer.topics}
            except errors.BrokerError as exc:
                refused = exc
        out = []
        for resource in request.resources:
            code, message, configs = ErrorCode.none, None, {}
            if resource.resource_type == RESOURCE_TOPIC:
                topic = described.get(resource.resource_name)
                if refused is not None:
                    code, message = kafka_code(refused.errno), refused.message
                elif topic is None or topic.error_code:
                    code = kafka_code(topic.error_code if topic else errors.UnknownTopicOrPartitionError.errno)
                    message = topic.error_message if topic else None
                else:
                    configs = topic.configs
            elif resource.resource_type != RESOURCE_BROKER:  # a broker's settings: none a client may need
                code, message = ErrorCode.invalid_request, f"resource type {resource.resource_type} is not served"
            keys = resource.configuration_keys
            entries = tuple(build(entry_type, name=name, value=value, read_only=False, is_default=False,
                                  config_source=SOURCE_TOPIC, is_sensitive=False, synonyms=(),
                                  config_type=_config_type(value), documentation=None)
                            for name, value in sorted(configs.items()) if keys is None or name in keys)
            out.append(build(result_type, error_code=code, error_message=message,
                             resource_type=resource.resource_type, resource_name=resource.resource_name,
                             configs=entries))
        return build(response_type, throttle_time=NO_THROTTLE, results=tuple(out))

    # -- groups ---------------------------------------------------------------------------------

    async def describe_groups(self, request, response_type, session: Session):
        group_type = item_type(response_type, "groups")
        member_type = item_type(group_type, "members")
        out = []
        for group_id in request.groups:
            native = m.DescribeGroupRequest(group_id=group_id, group_type="stream")
            values = dict(error_code=ErrorCode.none, group_id=group_id, group_state="Dead", protocol_type="",
                          protocol_data="", members=(), authorized_operations=OPERATIONS_UNKNOWN)
            try:
                answer: m.DescribeGroupResponse = await self._router.call(session, ApiKey.DESCRIBE_GROUP, native)
                if answer.coordinator not in (-1, self._broker_id):
                    raise errors.NotCoordinatorError(f"broker {answer.coordinator} coordinates this group")
            except errors.BrokerError as exc:
                values["error_code"] = kafka_code(exc.errno)
                out.append(build(group_type, **values))
                continue
            classic = self._groups.groups.get(native.group_id)  # renamed in place to its broker-side id
            if classic is not None and classic.members:
                values.update(
                    group_state=classic.state.value, protocol_type=classic.protocol_type,
                    protocol_data=classic.protocol if classic.state is not State.PREPARING_REBALANCE else "",
                    members=tuple(build(member_type, member_id=member.member_id, group_instance_id=None,
                                        client_id="", client_host="",
                                        member_metadata=dict(member.protocols).get(classic.protocol, b""),
                                        member_assignment=member.assignment)
                                  for member in classic.members.values()))
            elif answer.members:  # Tideway's own consumers (the KIP-848 protocol)
                values.update(group_state="Stable", protocol_type=CONSUMER_PROTOCOL, members=tuple(
                    build(member_type, member_id=member.member_id, group_instance_id=None, client_id=member.client_id,
                          client_host="", member_metadata=b"", member_assignment=b"")
                    for member in answer.members))
            elif answer.group_type:  # offsets and no members
                values.update(group_state=State.EMPTY.value, protocol_type=CONSUMER_PROTOCOL)
            out.append(build(group_type, **values))
        return build(response_type, throttle_time=NO_THROTTLE, groups=tuple(out))

    async def delete_groups(self, request, response_type, session: Session):
        """Kafka's DeleteGroups (``kafka-consumer-groups.sh --delete``): a group without members loses every position
        (and is gone); one with members, Kafka's or Tideway's own, is NON_EMPTY_GROUP."""
        result_type = item_type(response_type, "results")
        results = [build(result_type, group_id=group_id, error_code=await self._delete_group(session, group_id))
                   for group_id in request.groups_names]
        return build(response_type, throttle_time=NO_THROTTLE, results=tuple(results))

    async def _delete_group(self, session: Session, group_id: str) -> ErrorCode:
        asked = m.DescribeGroupRequest(group_id=group_id, group_type="stream")
        try:
            described: m.DescribeGroupResponse = await self._router.call(session, ApiKey.DESCRIBE_GROUP, asked)
            if described.coordinator not in (-1, self._broker_id):
                return ErrorCode.not_coordinator
            if described.members:
                return ErrorCode.non_empty_group
            if not described.offsets:
                return ErrorCode.group_id_not_found
            answer: m.OffsetDeleteResponse = await self._router.call(session, ApiKey.OFFSET_DELETE, m.OffsetDeleteRequest(
                group_id=group_id, partitions=[m.TopicPartitionRef(topic=o.topic, partition=o.partition)
                                               for o in described.offsets]))
        except errors.BrokerError as exc:
            return kafka_code(exc.errno)
        refused = next((r.error_code for r in answer.partitions if r.error_code), 0)
        if refused:
            return kafka_code(refused)
        self._groups.forget_if_empty(asked.group_id)  # (renamed in place to its broker-side id)
        return ErrorCode.none

    async def offset_delete(self, request, response_type, session: Session):
        """Kafka's OffsetDelete (``kafka-consumer-groups.sh --delete-offsets``): a group forgets its positions on the
        partitions named, refused per partition (GROUP_SUBSCRIBED_TO_TOPIC) for a topic its members read."""
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions]
        native = m.OffsetDeleteRequest(group_id=request.group_id, partitions=[
            m.TopicPartitionRef(topic=name, partition=index) for name, index in wanted])
        try:
            answer: m.OffsetDeleteResponse = await self._router.call(session, ApiKey.OFFSET_DELETE, native)
        except errors.BrokerError as exc:
            return build(response_type, error_code=kafka_code(exc.errno), throttle_time=NO_THROTTLE, topics=())
        codes = {(r.topic, r.partition): kafka_code(r.error_code) for r in answer.partitions}
        by_topic: dict[str, list] = {}
        for name, index in wanted:
            by_topic.setdefault(name, []).append(build(partition_type, partition_index=index,
                                                       error_code=codes.get((name, index), ErrorCode.unknown_topic_or_partition)))
        return build(response_type, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    async def list_groups(self, request, response_type, session: Session):
        group_type = item_type(response_type, "groups")
        try:
            answer: m.ListGroupsResponse = await self._router.call(session, ApiKey.LIST_GROUPS, m.ListGroupsRequest())
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=kafka_code(exc.errno), groups=())
        states: dict[str, str] = {g.group_id: State.EMPTY.value for g in answer.groups if g.group_type == "stream"}
        principal = session.principal
        for broker_id, classic in self._groups.groups.items():
            if principal is not None and principal.is_tenant:
                own = principal.names.own_group(broker_id)
                if own is None or own[1] != "stream":
                    continue
                name = own[0]
            else:
                name = broker_id
            states[name] = classic.state.value
        wanted_states = {s.lower() for s in getattr(request, "states_filter", ())}
        wanted_types = {t.lower() for t in getattr(request, "types_filter", ())}
        if wanted_types and "classic" not in wanted_types and CONSUMER_PROTOCOL not in wanted_types:
            states = {}
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, groups=tuple(
            build(group_type, group_id=name, protocol_type=CONSUMER_PROTOCOL, group_state=state, group_type="classic")
            for name, state in sorted(states.items()) if not wanted_states or state.lower() in wanted_states))

    # -- offsets and the cluster ------------------------------------------------------------------------

    async def offset_for_leader_epoch(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(t.topic, p) for t in request.topics for p in t.partitions]
        results: dict[tuple[str, int], tuple[ErrorCode, int, int]] = {}
        if getattr(request, "replica_id", m.CONSUMER) != m.CONSUMER:
            results = {(name, p.partition): (ErrorCode.not_leader_or_follower, -1, -1) for name, p in wanted}
        else:
            native = m.OffsetForLeaderEpochRequest(partitions=[
                m.EpochQuery(topic=name, partition=p.partition, leader_epoch=p.leader_epoch,
                             current_leader_epoch=getattr(p, "current_leader_epoch", -1)) for name, p in wanted])
            try:
                answer: m.OffsetForLeaderEpochResponse = await self._router.call(
                    session, ApiKey.OFFSET_FOR_LEADER_EPOCH, native)
            except errors.BrokerError as exc:
                results = {(name, p.partition): (kafka_code(exc.errno), -1, -1) for name, p in wanted}
            else:
                results = {(r.topic, r.partition): (kafka_code(r.error_code), r.leader_epoch, r.end_offset)
                           for r in answer.partitions}
        by_topic: dict[str, list] = {}
        for name, p in wanted:
            code, epoch, end = results.get((name, p.partition), (ErrorCode.unknown_server_error, -1, -1))
            by_topic.setdefault(name, []).append(build(partition_type, error_code=code, partition=p.partition,
                                                       leader_epoch=epoch, end_offset=end))
        return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(
            build(topic_type, topic=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    async def describe_cluster(self, request, response_type, session: Session):
        broker_type = item_type(response_type, "brokers")
        endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)
        values = dict(throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                      endpoint_type=endpoint_type, cluster_id=CLUSTER_ID, controller_id=-1, brokers=(),
                      cluster_authorized_operations=OPERATIONS_UNKNOWN)
        if endpoint_type != ENDPOINT_BROKERS:
            values.update(error_code=ErrorCode.unsupported_endpoint_type,
                          error_message="only brokers' endpoints are served (controllers are the platform's)")
            return build(response_type, **values)
        try:
            answer: m.MetadataResponse = await self._router.call(session, ApiKey.METADATA, m.MetadataRequest(topics=[]))
        except errors.BrokerError as exc:
            values.update(error_code=kafka_code(exc.errno), error_message=exc.message)
            return build(response_type, **values)
        brokers = tuple(build(broker_type, broker_id=b.node_id, host=b.host, port=b.port, rack=b.rack, is_fenced=False)
                        for b in answer.brokers)
        values.update(brokers=brokers, controller_id=self._broker_id)  # as in Metadata (apis.py)
        return build(response_type, **values)
