"""Kafka's APIs, each a translation onto the broker's own: the same handlers, authorizer and tenant views.

Every data request is rewritten as the native request it means (``tideway.protocol.messages``) and sent through
the broker's ``Router.call`` with the connection's session: the one authorizer checks the key's scopes and queue
patterns and gives a tenant's names their broker-side prefix on the way in and takes it off on the way out, the
replica manager appends and reads, metering counts it as any request. Only the answer's shape is Kafka's.
RecordBatches pass through as bytes both ways.

Kafka-only requests are checked here, against the same principal: InitProducerId needs the produce scope; the
classic group requests (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) first ask the broker's own FindCoordinator,
which checks the consume scope and gives a tenant's group id its broker-side name, and run on the group's
coordinator only (``groups.ClassicGroups`` holds their membership). A Kafka group's offsets are committed and
fetched through the broker's own OffsetCommit and OffsetFetch, so they sit where Tideway's stream groups keep
theirs, and lag, alerts and the console see them.

Topic admin, configs, group listings and the cluster's description are ``admin.KafkaAdmin``'s; answers are
built as ``answers`` says.
"""

from __future__ import annotations

import datetime
import logging
import secrets

from kio.schema.errors import ErrorCode
from tideway_server.brokers.kafka.admin import KafkaAdmin
from tideway_server.brokers.kafka.answers import (
    CLUSTER_ID,
    NO_THROTTLE,
    OPERATIONS_UNKNOWN,
    UNKNOWN_TOPIC_ID,
    build,
    item_type,
    kafka_code,
    milliseconds,
)
from tideway_server.brokers.kafka.groups import ClassicGroups, GroupError
from tideway_server.brokers.kafka.transactions import KafkaTransactions
from tideway_server.brokers.security.acl import PRODUCE
from tideway_server.brokers.server.connection import Session
from tideway_server.brokers.server.rates import CONSUME, PUBLISH, TenantRates
from tideway_server.brokers.server.router import Router

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.handshake import PLAIN_MECHANISM
from tideway.protocol.messages import ApiKey

__all__ = ["KafkaApis"]

log = logging.getLogger(__name__)

class KafkaApis:
    def __init__(self, router: Router, authenticator, *, broker_id: int, kafka_address) -> None:
        self._router = router
        self._authenticator = authenticator
        self._broker_id = broker_id
        self._kafka_address = kafka_address  # node id -> (host, port) of its Kafka listener, or None
        self.groups = ClassicGroups()
        self.rates = TenantRates()
        self.handlers = {
            0: self.produce, 1: self.fetch, 2: self.list_offsets, 3: self.metadata, 8: self.offset_commit,
            9: self.offset_fetch, 28: self.txn_offset_commit, 10: self.find_coordinator, 11: self.join_group, 12: self.heartbeat,
            13: self.leave_group, 14: self.sync_group, 17: self.sasl_handshake, 22: self.init_producer_id,
            36: self.sasl_authenticate,
        }
        self.admin = KafkaAdmin(router, self.groups, broker_id=broker_id)
        self.handlers.update(self.admin.handlers)
        self.transactions = KafkaTransactions(router)
        self.handlers.update(self.transactions.handlers)

    # -- authentication ------------------------------------------------------------------------

    async def sasl_handshake(self, request, response_type, session: Session):
        if request.mechanism != PLAIN_MECHANISM:
            return build(response_type, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=(PLAIN_MECHANISM,))
        return build(response_type, error_code=ErrorCode.none, mechanisms=(PLAIN_MECHANISM,))

    async def sasl_authenticate(self, request, response_type, session: Session):
        """PLAIN: the user name is free (the key's prefix reads well in logs), the password is the API key."""
        native = m.SaslAuthenticateRequest(mechanism=PLAIN_MECHANISM, auth_bytes=bytes(request.auth_bytes))
        try:
            await self._authenticator.authenticate(native, session)
        except errors.BrokerError as exc:
            return build(response_type, error_code=kafka_code(exc.errno), error_message=exc.message, auth_bytes=b"",
                         session_lifetime=NO_THROTTLE)
        return build(response_type, error_code=ErrorCode.none, error_message=None, auth_bytes=b"",
                     session_lifetime=NO_THROTTLE)

    # -- metadata ---------------------------------------------------------------------------------

    async def metadata(self, request, response_type, session: Session):
        names = None if request.topics is None else [t.name for t in request.topics if t.name is not None]
        if names is not None and not names and request.__version__ == 0:
            names = None  # v0: an empty list meant every topic
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        broker_type = item_type(response_type, "brokers")
        try:
            answer: m.MetadataResponse = await self._router.call(session, ApiKey.METADATA, m.MetadataRequest(topics=names))
        except errors.BrokerError as exc:
            code = kafka_code(exc.errno)
            topics = tuple(build(topic_type, error_code=code, name=name, topic_id=UNKNOWN_TOPIC_ID, is_internal=False,
                                 partitions=(), topic_authorized_operations=OPERATIONS_UNKNOWN) for name in names or ())
            answer = m.MetadataResponse()
        else:
            topics = tuple(
                build(topic_type, error_code=kafka_code(t.error_code), name=t.name, topic_id=UNKNOWN_TOPIC_ID,
                      is_internal=False, topic_authorized_operations=OPERATIONS_UNKNOWN,
                      partitions=tuple(build(partition_type, error_code=kafka_code(p.error_code),
                                             partition_index=p.partition, leader_id=p.leader,
                                             leader_epoch=p.leader_epoch, replica_nodes=tuple(p.replicas),
                                             isr_nodes=tuple(p.isr), offline_replicas=())
                                       for p in t.partitions))
                for t in answer.topics)
        brokers = tuple(build(broker_type, node_id=b.node_id, host=b.host, port=b.port, rack=b.rack)
                        for b in answer.brokers)
        # Kafka's clients send topic admin to the "controller": every broker forwards it to Tideway's own
        # controller (not a broker, and not a tenant's business), so this broker names itself.
        return build(response_type, throttle_time=NO_THROTTLE, brokers=brokers, cluster_id=CLUSTER_ID,
                     controller_id=self._broker_id, topics=topics, cluster_authorized_operations=OPERATIONS_UNKNOWN)

    # -- produce ---------------------------------------------------------------------------------

    async def produce(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "responses")
        partition_type = item_type(topic_type, "partition_responses")
        wanted = [(topic.name, p.index) for topic in request.topic_data for p in topic.partition_data]
        results: dict[tuple[str, int], tuple[int, str | None, int, int]] = {}
        # A transactional producer's batches carry its producer id and the transactional bit: the partitions keep
        # its transactions (brokers/storage/transactions.py) until its coordinator's markers end them.
        native = m.ProduceRequest(acks=request.acks, timeout_ms=milliseconds(request.timeout),
                                  transactional_id=request.transactional_id or "", partitions=[
            m.ProducePartition(topic=topic.name, partition=p.index, records=bytes(p.records or b""))
            for topic in request.topic_data for p in topic.partition_data])
        # Charged as it arrives (as Kafka charges a request's bytes), so that requests the client sent behind
        # this one wait out the debt before they start (BrokerConnection.mute).
        throttle = self._throttle(session, PUBLISH, sum(len(p.records) for p in native.partitions))
        try:
            answer: m.ProduceResponse = await self._router.call(session, ApiKey.PRODUCE, native)
        except errors.BrokerError as exc:
            for key in wanted:
                results[key] = (kafka_code(exc.errno), exc.message, -1, -1)
        else:
            for r in answer.partitions:
                results[(r.topic, r.partition)] = (kafka_code(r.error_code), r.error_message or None, r.base_offset,
                                                   r.log_start_offset)
        if request.acks == 0:
            return None  # Kafka answers nothing to acks=0
        by_topic: dict[str, list] = {}
        for name, index in wanted:
            code, message, base_offset, log_start = results.get((name, index), (ErrorCode.unknown_server_error,
                                                                               "no answer for this partition", -1, -1))
            by_topic.setdefault(name, []).append(build(
                partition_type, index=index, error_code=code, base_offset=base_offset, log_append_time=None,
                log_start_offset=log_start, record_errors=(), error_message=message))
        return build(response_type, throttle_time=throttle, responses=tuple(
            build(topic_type, name=name, partition_responses=tuple(parts)) for name, parts in by_topic.items()))

    def _throttle(self, session: Session, direction: str, amount: int) -> datetime.timedelta:
        """A tenant's bytes against its plan's rate on this broker (``rates``): past it, the connection is not
        read for the debt's time and the answer says so (``throttle_time_ms``), as Kafka's quotas do."""
        principal = session.principal
        if principal is None or not principal.is_tenant:
            return NO_THROTTLE
        rate = principal.publish_bytes_per_s if direction == PUBLISH else principal.consume_bytes_per_s
        seconds = self.rates.charge(principal.tenant_id, direction, rate, amount)
        if seconds <= 0:
            return NO_THROTTLE
        if session.connection is not None:
            session.connection.mute(seconds)
        return datetime.timedelta(milliseconds=int(seconds * 1000))

    async def init_producer_id(self, request, response_type, session: Session):
        """An idempotent producer's id: random, as Tideway's own producers take theirs (62 bits: no two producers
        meet on a partition), epoch 0. A transactional producer's comes from its transaction coordinator."""
        principal = session.principal
        if request.transactional_id is not None:
            return await self.transactions.init_producer_id(request, response_type, session)
        if principal is not None and principal.is_tenant and not principal.grant.has_scope(PRODUCE):
            code = ErrorCode.cluster_authorization_failed
        else:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                         producer_id=secrets.randbits(62), producer_epoch=0)
        return build(response_type, throttle_time=NO_THROTTLE, error_code=code, producer_id=-1, producer_epoch=-1)

    # -- fetch and offsets --------------------------------------------------------------------------

    async def fetch(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "responses")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(topic.topic, p.partition) for topic in request.topics for p in topic.partitions]
        throttle = NO_THROTTLE
        if request.replica_id != m.CONSUMER:
            results = {key: (ErrorCode.not_leader_or_follower, None) for key in wanted}  # no Kafka follower here
        else:
            native = m.FetchRequest(
                replica_id=m.CONSUMER, max_wait_ms=milliseconds(request.max_wait), min_bytes=request.min_bytes,
                max_bytes=request.max_bytes, isolation_level=getattr(request, "isolation_level", 0), partitions=[
                    m.FetchPartition(topic=topic.topic, partition=p.partition, fetch_offset=p.fetch_offset,
                                     partition_max_bytes=p.partition_max_bytes,
                                     current_leader_epoch=getattr(p, "current_leader_epoch", -1))
                    for topic in request.topics for p in topic.partitions])
            results = {}
            try:
                answer: m.FetchResponse = await self._router.call(session, ApiKey.FETCH, native)
            except errors.BrokerError as exc:
                results = {key: (kafka_code(exc.errno), None) for key in wanted}
            else:
                for r in answer.partitions:
                    results[(r.topic, r.partition)] = (kafka_code(r.error_code), r)
                throttle = self._throttle(session, CONSUME, sum(len(r.records) for r in answer.partitions))
        aborted_type = item_type(partition_type, "aborted_transactions")
        by_topic: dict[str, list] = {}
        for name, index in wanted:
            code, r = results.get((name, index), (ErrorCode.unknown_server_error, None))
            by_topic.setdefault(name, []).append(build(
                partition_type, partition_index=index, error_code=code,
                high_watermark=r.high_watermark if r is not None else -1,
                last_stable_offset=r.last_stable_offset if r is not None else -1,
                log_start_offset=r.log_start_offset if r is not None else -1,
                aborted_transactions=tuple(build(aborted_type, producer_id=pid, first_offset=first)
                                           for pid, first in (r.aborted_transactions if r is not None else ())),
                preferred_read_replica=-1, records=(r.records if r is not None else b"")))
        return build(response_type, throttle_time=throttle, error_code=ErrorCode.none, session_id=0,
                     responses=tuple(build(topic_type, topic=name, partitions=tuple(parts))
                                     for name, parts in by_topic.items()))

    async def list_offsets(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(topic.name, p.partition_index, p.timestamp) for topic in request.topics for p in topic.partitions]
        native = m.ListOffsetsRequest(isolation_level=getattr(request, "isolation_level", m.READ_UNCOMMITTED),
                                      partitions=[m.ListOffsetsPartition(topic=name, partition=index, timestamp=stamp)
                                                  for name, index, stamp in wanted])
        results = {}
        try:
            answer: m.ListOffsetsResponse = await self._router.call(session, ApiKey.LIST_OFFSETS, native)
        except errors.BrokerError as exc:
            results = {(name, index): (kafka_code(exc.errno), -1, -1) for name, index, _ in wanted}
        else:
            for r in answer.partitions:
                results[(r.topic, r.partition)] = (kafka_code(r.error_code), r.offset, r.timestamp)
        by_topic: dict[str, list] = {}
        for name, index, _ in wanted:
            code, offset, stamp = results.get((name, index), (ErrorCode.unknown_server_error, -1, -1))
            by_topic.setdefault(name, []).append(build(
                partition_type, partition_index=index, error_code=code, timestamp=stamp, offset=offset, leader_epoch=-1))
        return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    # -- groups ---------------------------------------------------------------------------------------

    async def find_coordinator(self, request, response_type, session: Session):
        key_type = getattr(request, "key_type", 0)
        if key_type not in (0, 1):
            return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.invalid_request,
                         error_message=f"coordinator key type {key_type} is neither a group (0) nor a transaction (1)",
                         node_id=-1, host="", port=-1)
        try:
            answer: m.FindCoordinatorResponse = await self._router.call(session, ApiKey.FIND_COORDINATOR, m.FindCoordinatorRequest(
                group_id=request.key, group_type="transaction" if key_type == 1 else "stream"))
            address = self._kafka_address(answer.node_id)
            if address is None:
                raise errors.CoordinatorNotAvailableError("the coordinator has no Kafka listener")
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=kafka_code(exc.errno),
                         error_message=exc.message, node_id=-1, host="", port=-1)
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, error_message=None,
                     node_id=answer.node_id, host=address[0], port=address[1])

    async def _group(self, session: Session, group_id: str) -> str:
        """The broker-side id of ``group_id`` once the broker's authorizer allowed it, if this broker coordinates it."""
        request = m.FindCoordinatorRequest(group_id=group_id, group_type="stream")
        try:
            answer: m.FindCoordinatorResponse = await self._router.call(session, ApiKey.FIND_COORDINATOR, request)
        except errors.BrokerError as exc:
            raise GroupError(kafka_code(exc.errno), exc.message) from None
        if answer.node_id != self._broker_id:
            raise GroupError(ErrorCode.not_coordinator, f"broker {answer.node_id} coordinates this group")
        return request.group_id  # renamed in place for a tenant (brokers/server/authorizer.py)

    async def join_group(self, request, response_type, session: Session):
        member_type = item_type(response_type, "members")
        try:
            group_id = await self._group(session, request.group_id)
            joined = await self.groups.join(
                group_id, request.member_id, "kafka", request.protocol_type,
                [(p.name, bytes(p.metadata)) for p in request.protocols], milliseconds(request.session_timeout),
                milliseconds(getattr(request, "rebalance_timeout", request.session_timeout)))
        except GroupError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=exc.code, generation_id=-1,
                         protocol_name="", protocol_type=None, leader="", member_id=request.member_id, members=())
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                     generation_id=joined.generation, protocol_name=joined.protocol, protocol_type=request.protocol_type,
                     leader=joined.leader, member_id=joined.member_id,
                     members=tuple(build(member_type, member_id=mid, group_instance_id=None, metadata=metadata)
                                   for mid, metadata in joined.members))

    async def sync_group(self, request, response_type, session: Session):
        try:
            group_id = await self._group(session, request.group_id)
            assignment = await self.groups.sync(group_id, request.member_id, request.generation_id,
                                                {a.member_id: bytes(a.assignment) for a in request.assignments})
        except GroupError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=exc.code, assignment=b"")
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, assignment=assignment)

    async def heartbeat(self, request, response_type, session: Session):
        try:
            group_id = await self._group(session, request.group_id)
            self.groups.heartbeat(group_id, request.member_id, request.generation_id)
        except GroupError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=exc.code)
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none)

    async def leave_group(self, request, response_type, session: Session):
        try:
            group_id = await self._group(session, request.group_id)
            self.groups.leave(group_id, request.member_id)
        except GroupError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, error_code=exc.code)
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none)

    async def offset_commit(self, request, response_type, session: Session):
        generation = getattr(request, "generation_id_or_member_epoch", getattr(request, "generation_id", -1))
        return await self._commit(request, response_type, session, request.member_id, generation, lambda offsets: (
            ApiKey.OFFSET_COMMIT, m.OffsetCommitRequest(group_id=request.group_id, offsets=offsets)))

    async def txn_offset_commit(self, request, response_type, session: Session):
        """Offsets committed in a producer's transaction (``send_offsets_to_transaction``): the classic group's
        membership is checked here as for a commit (a zombie member is refused), then the group coordinator keeps
        them until the transaction ends."""
        return await self._commit(
            request, response_type, session, getattr(request, "member_id", ""), getattr(request, "generation_id", -1),
            lambda offsets: (ApiKey.TXN_OFFSET_COMMIT, m.TxnOffsetCommitRequest(
                transactional_id=request.transactional_id, group_id=request.group_id, producer_id=request.producer_id,
                producer_epoch=request.producer_epoch, offsets=offsets)))

    async def _commit(self, request, response_type, session: Session, member_id: str, generation: int, native_of):
        """OffsetCommit and TxnOffsetCommit: the classic member is checked, then ``native_of(offsets)`` (the native
        API and request) is sent; the answer per partition."""
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        wanted = [(topic.name, p.partition_index) for topic in request.topics for p in topic.partitions]
        results: dict[tuple[str, int], ErrorCode] = {}
        try:
            group_id = await self._group(session, request.group_id)
            self.groups.check_commit(group_id, member_id, generation)
            api, native = native_of([m.CommittedOffset(topic=topic.name, partition=p.partition_index,
                                                       offset=p.committed_offset, metadata=p.committed_metadata or "")
                                     for topic in request.topics for p in topic.partitions])
            answer = await self._router.call(session, api, native)
            results = {(r.topic, r.partition): kafka_code(r.error_code) for r in answer.offsets}
        except GroupError as exc:
            results = {key: exc.code for key in wanted}
        except errors.BrokerError as exc:
            results = {key: kafka_code(exc.errno) for key in wanted}
        by_topic: dict[str, list] = {}
        for name, index in wanted:
            by_topic.setdefault(name, []).append(build(partition_type, partition_index=index,
                                                       error_code=results.get((name, index), ErrorCode.none)))
        return build(response_type, throttle_time=NO_THROTTLE, topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    async def offset_fetch(self, request, response_type, session: Session):
        topic_type = item_type(response_type, "topics")
        partition_type = item_type(topic_type, "partitions")
        refs = None if request.topics is None else [m.TopicPartitionRef(topic=t.name, partition=p)
                                                    for t in request.topics for p in t.partition_indexes]
        try:
            await self._group(session, request.group_id)
            answer: m.OffsetFetchResponse = await self._router.call(
                session, ApiKey.OFFSET_FETCH, m.OffsetFetchRequest(
                    group_id=request.group_id, partitions=refs, require_stable=getattr(request, "require_stable", False)))
        except GroupError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, topics=(), error_code=exc.code)
        except errors.BrokerError as exc:
            return build(response_type, throttle_time=NO_THROTTLE, topics=(), error_code=kafka_code(exc.errno))
        by_topic: dict[str, list] = {}
        for r in answer.offsets:
            by_topic.setdefault(r.topic, []).append(build(
                partition_type, partition_index=r.partition, committed_offset=r.offset, committed_leader_epoch=-1,
                metadata=r.metadata or "", error_code=kafka_code(r.error_code)))
        return build(response_type, throttle_time=NO_THROTTLE, error_code=ErrorCode.none, topics=tuple(
            build(topic_type, name=name, partitions=tuple(parts)) for name, parts in by_topic.items()))

    async def expire_sessions(self) -> None:
        self.groups.expire_sessions()
