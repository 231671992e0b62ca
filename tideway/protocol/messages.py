"""Request and response bodies of the native protocol, as msgspec Structs.

Bodies are msgpack maps (field names on the wire) so fields can be added in
later versions with defaults. Every response has ``error_code`` and
``error_message`` at the top, and every other field has a default: a broker
that cannot handle a request at all (unknown API, undecodable body) answers
with just those two fields, and the client decodes that into the response
type it expected. Per-partition results carry their own error fields.

Error codes are listed in ``tideway/protocol/errors.py``.

Why one file of ~750 lines: it is the wire format, one struct per request and response, in API order;
reading or changing the protocol means reading them side by side.
"""

from __future__ import annotations

import enum

import msgspec
from msgspec import Struct

__all__ = [
    "ApiKey",
    "API_VERSIONS",
    "REQUEST_TYPES",
    "RESPONSE_TYPES",
]


class ApiKey(enum.IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    INIT_PRODUCER_ID = 22  # a transactional producer's id and epoch (fences the previous instance)
    ADD_PARTITIONS_TO_TXN = 24  # partitions join the producer's transaction before it writes to them
    ADD_OFFSETS_TO_TXN = 25  # a group's offsets will be committed in the transaction
    TXN_OFFSET_COMMIT = 28  # to the group's coordinator: offsets that count if the transaction commits
    END_TXN = 26  # commit or abort the producer's transaction
    DESCRIBE_TRANSACTIONS = 65  # transactions' state, partitions and age
    LIST_TRANSACTIONS = 66  # the transactions a coordinator holds
    WRITE_TXN_MARKERS = 27  # transaction coordinator -> partition leaders: end a transaction (peers only)
    DELETE_RECORDS = 21  # delete a partition's records below an offset (a queue's purge); the manage scope
    METADATA = 3
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DESCRIBE_TOPICS = 75
    CREATE_PARTITIONS = 37  # grow a topic's partition count (through the controller)
    ALTER_CONFIGS = 44  # change a topic's settings (through the controller); unnamed settings keep their value
    CLUSTER_STATE = 1000  # controller -> broker: the whole cluster's metadata and this broker's roles
    BROKER_REGISTER = 1001  # broker -> controller, at start
    BROKER_HEARTBEAT = 1002  # broker -> controller, every heartbeat interval
    ALTER_ISR = 1003  # leader broker -> controller: shrink or expand a partition's ISR
    DESCRIBE_CLUSTER = 1004  # anyone -> controller: brokers with their state, every partition
    FIND_COORDINATOR = 10  # which broker coordinates a group
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    CONSUMER_GROUP_HEARTBEAT = 68  # KIP-848: join, heartbeat, leave; the answer carries the assignment
    DESCRIBE_GROUP = 69
    LIST_GROUPS = 16  # the groups a coordinator holds (optionally: those with a position on one topic)
    SHARE_ACQUIRE = 78  # queue model: lock and return records
    SHARE_ACKNOWLEDGE = 79  # queue model: accept, release, reject, extend
    SASL_HANDSHAKE = 17  # first request on a connection: mechanisms this listener takes, and a nonce
    SASL_AUTHENTICATE = 36  # PLAIN (API key or service key) or TIDEWAY-CLUSTER (internal peers)
    DESCRIBE_CREDENTIAL = 1005  # broker -> controller: an API key's digest, tenant, scopes and patterns
    REPLICA_DAMAGED = 1006  # broker -> controller: a replica here holds a batch that fails its CRC
    OFFSET_FOR_LEADER_EPOCH = 23  # the end offset of a leader epoch, for a consumer checking its position
    OFFSET_DELETE = 47  # forget a stream group's positions on partitions no member reads (the group goes with its last)
    DESCRIBE_TRAFFIC = 1100  # anyone -> broker: messages and bytes in and out, per topic and per tenant per minute


ACKS_ALL = -1
CONSUMER = -1  # FetchRequest.replica_id of a consumer
QUEUE_READER = -2  # ... of a broker reading a remote partition for a queue group it coordinates (peers only; not metered)
INSPECTOR = -3  # ... of a platform service looking at a record for itself, e.g. a lag's age (services only; not metered)
READ_UNCOMMITTED, READ_COMMITTED = 0, 1  # FetchRequest.isolation_level (Kafka's values)
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1


class _Response(Struct, kw_only=True, omit_defaults=True):
    error_code: int = 0
    error_message: str = ""


# -- produce --------------------------------------------------------------------


# Batches of one idempotent producer and partition a broker remembers (so that a resent one is answered with its
# first offsets); a producer keeps fewer than this in flight per partition.
RECENT_BATCHES_MAX = 64


class ProducePartition(Struct, kw_only=True):
    topic: str
    partition: int
    records: bytes  # one or more whole RecordBatches


class ProduceRequest(Struct, kw_only=True):
    acks: int = 1  # 0: no answer, 1: leader appended, -1: all in-sync replicas
    timeout_ms: int = 30_000
    partitions: list[ProducePartition] = []
    # A transactional producer's: a partition checks with the id's coordinator that it is in the producer's open
    # transaction before the transaction's first write there (KIP-890), and refuses it otherwise.
    transactional_id: str = ""


class ProducePartitionResult(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    base_offset: int = -1
    log_start_offset: int = -1


class ProduceResponse(_Response):
    partitions: list[ProducePartitionResult] = []


# -- fetch ----------------------------------------------------------------------


class FetchPartition(Struct, kw_only=True):
    topic: str
    partition: int
    fetch_offset: int
    partition_max_bytes: int = 1 << 20
    # Followers only: the leader epoch they believe current, and the epoch of
    # the last batch in their log (for the divergence check).
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1  # followers: the first offset they keep (the leader waits on it: DeleteRecords)


class FetchRequest(Struct, kw_only=True):
    replica_id: int = -1  # a follower's broker id; CONSUMER (-1), QUEUE_READER (-2) or INSPECTOR (-3), below
    max_wait_ms: int = 500
    min_bytes: int = 1
    max_bytes: int = 50 << 20  # for every answer together, when the fetch streams (answers_max > 1)
    partitions: list[FetchPartition] = []
    # Consumers only: a fetch that had to wait for records may answer again each time more arrive, up
    # to this many answers in all, until max_wait_ms from its start (FetchResponse.more says whether
    # another answer follows). 1: one answer, as every fetch before.
    answers_max: int = 1
    # Consumers only: READ_COMMITTED stops at each partition's last stable offset (no open transaction's
    # records) and names the aborted transactions among the records, which readers drop; READ_UNCOMMITTED
    # reads to the high watermark. Transaction markers are never messages, in either.
    isolation_level: int = 0


class FetchPartitionResult(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    high_watermark: int = -1
    log_start_offset: int = -1
    log_end_offset: int = -1
    # Set when a follower's log diverged: truncate to this epoch's end offset.
    diverging_epoch: int = -1
    diverging_end_offset: int = -1
    last_stable_offset: int = -1
    aborted_transactions: list[tuple[int, int]] = []  # READ_COMMITTED: (producer id, first offset) of those in records
    records: bytes = b""


class FetchResponse(_Response):
    partitions: list[FetchPartitionResult] = []
    more: bool = False  # another answer to this fetch follows (same correlation id)


# -- list offsets ---------------------------------------------------------------------


class ListOffsetsPartition(Struct, kw_only=True):
    topic: str
    partition: int
    timestamp: int  # LATEST_TIMESTAMP, EARLIEST_TIMESTAMP or ms since the epoch


class ListOffsetsRequest(Struct, kw_only=True):
    partitions: list[ListOffsetsPartition] = []
    # READ_COMMITTED (the default): LATEST_TIMESTAMP answers the last stable offset (where read_committed reads
    # stop, so lag is counted against it); READ_UNCOMMITTED: the high watermark.
    isolation_level: int = READ_COMMITTED


class ListOffsetsPartitionResult(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    offset: int = -1
    timestamp: int = -1


class ListOffsetsResponse(_Response):
    partitions: list[ListOffsetsPartitionResult] = []


# -- transactions ---------------------------------------------------------------------------


class InitProducerIdRequest(Struct, kw_only=True):
    transactional_id: str
    transaction_timeout_ms: int = 60_000


class InitProducerIdResponse(_Response):
    producer_id: int = -1
    producer_epoch: int = -1


class AddPartitionsToTxnRequest(Struct, kw_only=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    partitions: list[TopicPartitionRef] = []
    verify_only: bool = False  # a partition leader asking whether they are in the open transaction (adds nothing)


class PartitionError(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""


class AddPartitionsToTxnResponse(_Response):
    results: list[PartitionError] = []


class EndTxnRequest(Struct, kw_only=True):
    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool


class EndTxnResponse(_Response):
    pass


class DescribeTransactionsRequest(Struct, kw_only=True):
    transactional_ids: list[str] = []


class TransactionDescription(Struct, kw_only=True, omit_defaults=True):
    transactional_id: str
    error_code: int = 0
    error_message: str = ""
    state: str = ""  # Empty, Ongoing, PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort
    producer_id: int = -1
    producer_epoch: int = -1
    timeout_ms: int = 0
    started_ms: int = -1  # when the open transaction began (-1: none open)
    partitions: list[TopicPartitionRef] = []


class DescribeTransactionsResponse(_Response):
    transactions: list[TransactionDescription] = []


class ListTransactionsRequest(Struct, kw_only=True):
    states: list[str] = []  # only these states ([]: all)
    older_than_ms: int = -1  # only transactions open longer than this (-1: any)


class ListTransactionsResponse(_Response):
    transactions: list[TransactionDescription] = []  # transactional_id, state, producer_id, started_ms


# -- transaction markers --------------------------------------------------------------------


class TxnMarker(Struct, kw_only=True):
    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: list[TopicPartitionRef] = []


class WriteTxnMarkersRequest(Struct, kw_only=True):
    markers: list[TxnMarker] = []
    timeout_ms: int = 30_000  # for every in-sync replica to have the markers


class TxnMarkerResult(Struct, kw_only=True, omit_defaults=True):
    producer_id: int
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""


class WriteTxnMarkersResponse(_Response):
    results: list[TxnMarkerResult] = []


# -- delete records ----------------------------------------------------------------------


class DeleteRecordsPartition(Struct, kw_only=True):
    topic: str
    partition: int
    offset: int  # delete every record below this one; -1: below the high watermark (all there is)


class DeleteRecordsRequest(Struct, kw_only=True):
    partitions: list[DeleteRecordsPartition] = []
    timeout_ms: int = 30_000  # for every in-sync replica to delete them too


class DeleteRecordsPartitionResult(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    low_watermark: int = -1  # the partition's log start offset now


class DeleteRecordsResponse(_Response):
    partitions: list[DeleteRecordsPartitionResult] = []


# -- metadata ---------------------------------------------------------------------------


class MetadataRequest(Struct, kw_only=True):
    topics: list[str] | None = None  # None: every topic


class BrokerInfo(Struct, kw_only=True):
    node_id: int
    host: str
    port: int
    rack: str | None = None


class ListenerAddress(Struct, kw_only=True, array_like=True):
    node_id: int
    host: str
    port: int


class PartitionInfo(Struct, kw_only=True):
    partition: int
    leader: int
    leader_epoch: int = 0
    replicas: list[int] = []
    isr: list[int] = []
    error_code: int = 0


class TopicInfo(Struct, kw_only=True, omit_defaults=True):
    name: str
    error_code: int = 0
    error_message: str = ""
    partitions: list[PartitionInfo] = []


class MetadataResponse(_Response):
    brokers: list[BrokerInfo] = []
    controller_id: int = -1
    controller_address: str = ""  # host:port of the controller this broker talks to, if any
    topics: list[TopicInfo] = []


# -- admin --------------------------------------------------------------------------------


class NewTopic(Struct, kw_only=True):
    name: str
    partitions: int = 1
    replication_factor: int = 1
    configs: dict[str, str] = {}


class CreateTopicsRequest(Struct, kw_only=True):
    topics: list[NewTopic] = []
    validate_only: bool = False
    # Set by a broker's authorizer for a tenant's key (never by the tenant): the topics are the tenant's queues,
    # created by the control plane with the plan's quotas, as through the REST API. ``acting`` names the key.
    tenant_id: int | None = None
    acting: str = ""


class TopicResult(Struct, kw_only=True, omit_defaults=True):
    name: str
    error_code: int = 0
    error_message: str = ""


class CreateTopicsResponse(_Response):
    topics: list[TopicResult] = []


class DeleteTopicsRequest(Struct, kw_only=True):
    names: list[str] = []
    tenant_id: int | None = None  # as in CreateTopicsRequest: the tenant's queues, deleted by the control plane
    acting: str = ""


class DeleteTopicsResponse(_Response):
    topics: list[TopicResult] = []


class CreatePartitionsRequest(Struct, kw_only=True):
    topic: str
    count: int  # the new total number of partitions
    validate_only: bool = False
    tenant_id: int | None = None  # as in CreateTopicsRequest: the tenant's queue, grown by the control plane
    acting: str = ""


class CreatePartitionsResponse(_Response):
    pass


class AlterConfigsRequest(Struct, kw_only=True):
    topic: str
    set: dict[str, str] = {}  # setting -> new value
    delete: list[str] = []  # settings that go back to their default


class AlterConfigsResponse(_Response):
    configs: dict[str, str] = {}  # the topic's settings after the change


class DescribeTopicsRequest(Struct, kw_only=True):
    names: list[str] | None = None


class PartitionDescription(Struct, kw_only=True):
    partition: int
    leader: int
    log_start_offset: int
    log_end_offset: int
    high_watermark: int
    size_bytes: int
    segments: int


class TopicDescription(Struct, kw_only=True, omit_defaults=True):
    name: str
    error_code: int = 0
    error_message: str = ""
    configs: dict[str, str] = {}
    partitions: list[PartitionDescription] = []


class DescribeTopicsResponse(_Response):
    topics: list[TopicDescription] = []


class ApiVersionsRequest(Struct, kw_only=True):
    client_name: str = ""


class ApiVersion(Struct, kw_only=True):
    api_key: int
    min_version: int
    max_version: int


class ApiVersionsResponse(_Response):
    apis: list[ApiVersion] = []


# -- controller -> broker -----------------------------------------------------------------


class PartitionState(Struct, kw_only=True):
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    partition_epoch: int
    replicas: list[int]
    isr: list[int]


class TopicState(Struct, kw_only=True):
    name: str
    partitions: int
    replication_factor: int
    configs: dict[str, str] = {}


class ClusterStateRequest(Struct, kw_only=True):
    """The controller's view of the whole cluster, pushed to every broker.

    A broker applies the partition states whose epochs are newer than its own
    and ignores the request if ``controller_epoch`` is older than one it has seen.
    """

    controller_id: int
    controller_epoch: int
    brokers: list[BrokerInfo] = []
    topics: list[TopicState] = []
    partitions: list[PartitionState] = []
    deleted_topics: list[str] = []
    internal_listeners: list[ListenerAddress] = []  # where peers reach each broker (replication, coordinators)
    kafka_listeners: list[ListenerAddress] = []  # where Kafka clients reach each broker that has a Kafka listener


class ClusterStateResponse(_Response):
    pass


# -- broker -> controller ------------------------------------------------------------------


class BrokerRegisterRequest(Struct, kw_only=True):
    broker_id: int
    host: str  # the client listener, as clients should reach it
    port: int
    rack: str | None = None
    internal_host: str = ""  # the internal listener, as peers should reach it
    internal_port: int = -1
    kafka_host: str = ""  # the Kafka listener, as Kafka clients should reach it ("": none)
    kafka_port: int = -1


class BrokerRegisterResponse(_Response):
    broker_epoch: int = -1
    controller_epoch: int = -1


class BrokerHeartbeatRequest(Struct, kw_only=True):
    broker_id: int
    broker_epoch: int


class BrokerHeartbeatResponse(_Response):
    controller_epoch: int = -1


class AlterIsrRequest(Struct, kw_only=True):
    broker_id: int  # the leader asking
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: list[int]


class AlterIsrResponse(_Response):
    state: PartitionState | None = None


class DescribeClusterRequest(Struct, kw_only=True):
    pass


class BrokerStatus(Struct, kw_only=True):
    node_id: int
    host: str
    port: int
    rack: str | None = None
    state: str = "fenced"  # alive | fenced
    internal_host: str = ""
    internal_port: int = -1
    kafka_host: str = ""
    kafka_port: int = -1


class DescribeClusterResponse(_Response):
    controller_id: str = ""
    controller_epoch: int = -1
    brokers: list[BrokerStatus] = []
    topics: list[TopicState] = []
    partitions: list[PartitionState] = []


# -- groups (stream model) --------------------------------------------------------


class FindCoordinatorRequest(Struct, kw_only=True):
    group_id: str
    group_type: str = ""  # stream | queue: tenants' groups of each kind are different groups ("": stream);
    # "transaction": group_id is a transactional id, answered with its transaction coordinator


class FindCoordinatorResponse(_Response):
    node_id: int = -1
    host: str = ""
    port: int = -1


class TopicPartitionRef(Struct, kw_only=True, array_like=True):
    topic: str
    partition: int


class CommittedOffset(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    offset: int = -1  # -1: nothing committed
    metadata: str = ""
    commit_timestamp_ms: int = -1
    error_code: int = 0
    error_message: str = ""


class OffsetCommitRequest(Struct, kw_only=True):
    group_id: str
    member_id: str = ""  # "" with epoch -1: a consumer outside any group membership
    member_epoch: int = -1
    offsets: list[CommittedOffset] = []


class OffsetCommitResponse(_Response):
    offsets: list[CommittedOffset] = []  # per-partition errors


class OffsetFetchRequest(Struct, kw_only=True):
    group_id: str
    partitions: list[TopicPartitionRef] | None = None  # None: every committed partition
    # A partition whose offset a transaction commits and that is still open answers UNSTABLE_OFFSET_COMMIT
    # (ask again) instead of the offset before it (KIP-447: a new owner reads from the transaction's outcome).
    require_stable: bool = False


class TxnOffsetCommitRequest(Struct, kw_only=True):
    """Offsets committed as part of a producer's transaction (consume-transform-produce), to the group's
    coordinator: they count once the transaction commits, never if it aborts."""

    transactional_id: str
    group_id: str
    producer_id: int
    producer_epoch: int
    member_id: str = ""  # the consumer's membership, checked as an offset commit's (a zombie's is refused)
    member_epoch: int = -1
    offsets: list[CommittedOffset] = []


class TxnOffsetCommitResponse(_Response):
    offsets: list[CommittedOffset] = []  # per-partition errors


class AddOffsetsToTxnRequest(Struct, kw_only=True):
    """The group's offsets will be committed in the producer's transaction (its coordinator marks them too)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    group_id: str


class AddOffsetsToTxnResponse(_Response):
    pass


class OffsetFetchResponse(_Response):
    offsets: list[CommittedOffset] = []


class OffsetDeleteRequest(Struct, kw_only=True):
    group_id: str
    partitions: list[TopicPartitionRef] = []


class OffsetDeleteResponse(_Response):
    partitions: list[CommittedOffset] = []  # per partition: error_code 0 (forgotten, or there was none) or why not


class ConsumerGroupHeartbeatRequest(Struct, kw_only=True):
    group_id: str
    member_id: str = ""  # "" to join
    member_epoch: int = 0  # 0: join, -1: leave, else the epoch of the last answer
    topics: list[str] | None = None  # the subscription; None: unchanged
    owned: list[TopicPartitionRef] | None = None  # what the member holds now; None: unchanged
    session_timeout_ms: int = 45_000  # Kafka's default since 3.0 (KIP-735)
    client_id: str = ""


class ConsumerGroupHeartbeatResponse(_Response):
    member_id: str = ""
    member_epoch: int = -1
    heartbeat_interval_ms: int = 1_000
    assignment: list[TopicPartitionRef] = []  # every partition the member may own now


class DescribeGroupRequest(Struct, kw_only=True):
    group_id: str
    group_type: str = ""  # as in FindCoordinatorRequest


class MemberDescription(Struct, kw_only=True):
    member_id: str
    client_id: str
    member_epoch: int
    topics: list[str]
    assigned: list[TopicPartitionRef]
    revoking: list[TopicPartitionRef]


class SharePartitionDescription(Struct, kw_only=True):
    topic: str
    partition: int
    start_offset: int  # every record below is accepted or dead-lettered
    read_offset: int  # next offset the coordinator reads from the log
    available: int
    delayed: int
    in_flight: int
    dead_lettering: int


class DescribeGroupResponse(_Response):
    group_id: str = ""
    group_type: str = ""  # stream | queue | "" (unknown group)
    group_epoch: int = -1
    coordinator: int = -1
    members: list[MemberDescription] = []
    offsets: list[CommittedOffset] = []
    share_partitions: list[SharePartitionDescription] = []


class ListGroupsRequest(Struct, kw_only=True):
    topic: str | None = None  # only groups with committed offsets, members or queue state on this topic
    with_positions: bool = False  # also each group's member count and positions (on ``topic`` when it is given)


class GroupPosition(Struct, array_like=True):
    topic: str
    partition: int
    offset: int  # a stream group's committed offset; a queue group's oldest record not yet accepted or dead-lettered
    in_flight: int = 0  # a queue group's records delivered and not yet settled there


class ListedGroup(Struct, kw_only=True):
    group_id: str
    group_type: str  # stream | queue
    members: int = 0  # with_positions: stream group members
    positions: list[GroupPosition] = []  # with_positions


class ListGroupsResponse(_Response):
    groups: list[ListedGroup] = []


# -- leader epochs ---------------------------------------------------------------------------


class EpochQuery(Struct, kw_only=True):
    topic: str
    partition: int
    leader_epoch: int  # the epoch whose end offset is asked
    current_leader_epoch: int = -1  # the asker's idea of the leader's epoch (-1: not checked)


class OffsetForLeaderEpochRequest(Struct, kw_only=True):
    partitions: list[EpochQuery] = []


class EpochEnd(Struct, kw_only=True, omit_defaults=True):
    topic: str
    partition: int
    error_code: int = 0
    error_message: str = ""
    leader_epoch: int = -1  # the largest epoch <= the one asked that the log has
    end_offset: int = -1  # where that epoch ends: the next epoch's first offset, or the log end


class OffsetForLeaderEpochResponse(_Response):
    partitions: list[EpochEnd] = []


# -- traffic ---------------------------------------------------------------------------


class DescribeTrafficRequest(Struct, kw_only=True):
    topics: list[str] = []  # counters of these topics (unknown ones: zeros)
    history_scope: str | None = None  # the last hour, minute by minute, of a tenant's topics ("t2."); tenants: their own


class TopicTraffic(Struct, array_like=True):
    topic: str
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int


class TrafficMinute(Struct, array_like=True):
    minute: int  # its start, unix seconds
    messages_in: int
    bytes_in: int
    messages_out: int
    bytes_out: int


class DescribeTrafficResponse(_Response):
    started_ms: int = 0  # the counters count from here (this broker's start): a counter that went down means a restart
    topics: list[TopicTraffic] = []
    history: list[TrafficMinute] = []  # minutes that carried anything, oldest first; the last is the current one so far


# -- queues (share groups) --------------------------------------------------------


class ShareAcquireRequest(Struct, kw_only=True):
    group_id: str
    topic: str
    max_records: int = 100
    max_wait_ms: int = 0  # long polling: wait up to this long for a record
    lock_ms: int = 0  # 0: the queue's visibility timeout
    member_id: str = ""  # for logs and describe


class AcquiredRecord(Struct, kw_only=True, array_like=True):
    partition: int
    offset: int
    delivery_count: int
    lock_deadline_ms: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


class ShareAcquireResponse(_Response):
    records: list[AcquiredRecord] = []


class ShareAck(Struct, kw_only=True, omit_defaults=True):
    partition: int
    offset: int
    delivery_count: int
    action: str  # accept | release | reject | extend
    delay_ms: int = -1  # release: redeliver after this long (-1: the queue's backoff)
    lock_ms: int = 0  # extend: the new lock, from now
    error: str = ""  # release, reject: why (kept for the dead-letter headers)


class AcceptRange(Struct, array_like=True):
    """Accept every offset from ``first_offset`` to ``last_offset`` (both included), each in its ``delivery_count``-th delivery."""

    partition: int
    first_offset: int
    last_offset: int
    delivery_count: int


class ShareAcknowledgeRequest(Struct, kw_only=True):
    group_id: str
    topic: str
    acks: list[ShareAck] = []
    # Plain accepts, the common case, as ranges of consecutive offsets: a worker accepting each message of a
    # batch on its own sends a few ranges, not a thousand acks (Kafka's share groups acknowledge in ranges too).
    accepts: list[AcceptRange] = []


class ShareAckResult(Struct, kw_only=True, omit_defaults=True):
    partition: int
    offset: int
    error_code: int = 0
    error_message: str = ""
    lock_deadline_ms: int = -1


class ShareAcknowledgeResponse(_Response):
    results: list[ShareAckResult] = []  # one per ack, in their order
    accept_failures: list[ShareAckResult] = []  # the offsets of ``accepts`` that could not be accepted (the rest were)


# -- authentication ---------------------------------------------------------------


class SaslHandshakeRequest(Struct, kw_only=True):
    mechanism: str = ""  # the one the client means to use (informational)


class SaslHandshakeResponse(_Response):
    mechanisms: list[str] = []  # what this listener accepts
    nonce: bytes = b""  # fresh per connection: TIDEWAY-CLUSTER proofs are bound to it


class SaslAuthenticateRequest(Struct, kw_only=True):
    mechanism: str
    auth_bytes: bytes  # PLAIN: 0 user 0 key; TIDEWAY-CLUSTER: msgpack ClusterProof (tideway/protocol/handshake.py)


class SaslAuthenticateResponse(_Response):
    principal: str = ""  # who the connection now acts as, e.g. "key:1a2b3c4d5e6f"
    server_proof: bytes = b""  # TIDEWAY-CLUSTER: the server's proof that it holds the cluster secret


class DescribeCredentialRequest(Struct, kw_only=True):
    prefix: str  # the public part of a tenant API key


class DescribeCredentialResponse(_Response):
    found: bool = False
    tenant_id: int = -1
    secret_sha256: str = ""  # never the secret: brokers compare digests
    scopes: list[str] = []
    queue_patterns: list[str] = []
    revoked: bool = False
    connections_max: int = 0  # the tenant's plan: connections of one key to one broker (0: the broker's limit)
    publish_bytes_per_s: int = 0  # the tenant's plan: bytes per second it may produce to one broker (0: unlimited)
    consume_bytes_per_s: int = 0  # ... and read from one broker


class ReplicaDamagedRequest(Struct, kw_only=True):
    broker_id: int
    broker_epoch: int
    topic: str
    partition: int
    offset: int  # the first offset this replica cannot serve intact
    reason: str = ""


class ReplicaDamagedResponse(_Response):
    state: PartitionState | None = None  # the partition after the controller's decision


class ErrorResponse(_Response):
    """What a broker answers when it cannot even decode a request."""


REQUEST_TYPES: dict[ApiKey, type[Struct]] = {
    ApiKey.PRODUCE: ProduceRequest,
    ApiKey.FETCH: FetchRequest,
    ApiKey.LIST_OFFSETS: ListOffsetsRequest,
    ApiKey.DELETE_RECORDS: DeleteRecordsRequest,
    ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersRequest,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdRequest,
    ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnRequest,
    ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitRequest,
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnRequest,
    ApiKey.END_TXN: EndTxnRequest,
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsRequest,
    ApiKey.LIST_TRANSACTIONS: ListTransactionsRequest,
    ApiKey.METADATA: MetadataRequest,
    ApiKey.API_VERSIONS: ApiVersionsRequest,
    ApiKey.CREATE_TOPICS: CreateTopicsRequest,
    ApiKey.DELETE_TOPICS: DeleteTopicsRequest,
    ApiKey.DESCRIBE_TOPICS: DescribeTopicsRequest,
    ApiKey.CLUSTER_STATE: ClusterStateRequest,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsRequest,
    ApiKey.ALTER_CONFIGS: AlterConfigsRequest,
    ApiKey.BROKER_REGISTER: BrokerRegisterRequest,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatRequest,
    ApiKey.ALTER_ISR: AlterIsrRequest,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterRequest,
    ApiKey.FIND_COORDINATOR: FindCoordinatorRequest,
    ApiKey.OFFSET_COMMIT: OffsetCommitRequest,
    ApiKey.OFFSET_FETCH: OffsetFetchRequest,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatRequest,
    ApiKey.DESCRIBE_GROUP: DescribeGroupRequest,
    ApiKey.LIST_GROUPS: ListGroupsRequest,
    ApiKey.DESCRIBE_TRAFFIC: DescribeTrafficRequest,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochRequest,
    ApiKey.OFFSET_DELETE: OffsetDeleteRequest,
    ApiKey.SHARE_ACQUIRE: ShareAcquireRequest,
    ApiKey.SHARE_ACKNOWLEDGE: ShareAcknowledgeRequest,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeRequest,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateRequest,
    ApiKey.DESCRIBE_CREDENTIAL: DescribeCredentialRequest,
    ApiKey.REPLICA_DAMAGED: ReplicaDamagedRequest,
}

RESPONSE_TYPES: dict[ApiKey, type[Struct]] = {
    ApiKey.PRODUCE: ProduceResponse,
    ApiKey.FETCH: FetchResponse,
    ApiKey.LIST_OFFSETS: ListOffsetsResponse,
    ApiKey.DELETE_RECORDS: DeleteRecordsResponse,
    ApiKey.WRITE_TXN_MARKERS: WriteTxnMarkersResponse,
    ApiKey.INIT_PRODUCER_ID: InitProducerIdResponse,
    ApiKey.ADD_OFFSETS_TO_TXN: AddOffsetsToTxnResponse,
    ApiKey.TXN_OFFSET_COMMIT: TxnOffsetCommitResponse,
    ApiKey.ADD_PARTITIONS_TO_TXN: AddPartitionsToTxnResponse,
    ApiKey.END_TXN: EndTxnResponse,
    ApiKey.DESCRIBE_TRANSACTIONS: DescribeTransactionsResponse,
    ApiKey.LIST_TRANSACTIONS: ListTransactionsResponse,
    ApiKey.METADATA: MetadataResponse,
    ApiKey.API_VERSIONS: ApiVersionsResponse,
    ApiKey.CREATE_TOPICS: CreateTopicsResponse,
    ApiKey.DELETE_TOPICS: DeleteTopicsResponse,
    ApiKey.DESCRIBE_TOPICS: DescribeTopicsResponse,
    ApiKey.CLUSTER_STATE: ClusterStateResponse,
    ApiKey.CREATE_PARTITIONS: CreatePartitionsResponse,
    ApiKey.ALTER_CONFIGS: AlterConfigsResponse,
    ApiKey.BROKER_REGISTER: BrokerRegisterResponse,
    ApiKey.BROKER_HEARTBEAT: BrokerHeartbeatResponse,
    ApiKey.ALTER_ISR: AlterIsrResponse,
    ApiKey.DESCRIBE_CLUSTER: DescribeClusterResponse,
    ApiKey.FIND_COORDINATOR: FindCoordinatorResponse,
    ApiKey.OFFSET_COMMIT: OffsetCommitResponse,
    ApiKey.OFFSET_FETCH: OffsetFetchResponse,
    ApiKey.CONSUMER_GROUP_HEARTBEAT: ConsumerGroupHeartbeatResponse,
    ApiKey.DESCRIBE_GROUP: DescribeGroupResponse,
    ApiKey.LIST_GROUPS: ListGroupsResponse,
    ApiKey.DESCRIBE_TRAFFIC: DescribeTrafficResponse,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: OffsetForLeaderEpochResponse,
    ApiKey.OFFSET_DELETE: OffsetDeleteResponse,
    ApiKey.SHARE_ACQUIRE: ShareAcquireResponse,
    ApiKey.SHARE_ACKNOWLEDGE: ShareAcknowledgeResponse,
    ApiKey.SASL_HANDSHAKE: SaslHandshakeResponse,
    ApiKey.SASL_AUTHENTICATE: SaslAuthenticateResponse,
    ApiKey.DESCRIBE_CREDENTIAL: DescribeCredentialResponse,
    ApiKey.REPLICA_DAMAGED: ReplicaDamagedResponse,
}

# (min, max) version the broker speaks per API; every API is at version 0.
API_VERSIONS: dict[ApiKey, tuple[int, int]] = {api: (0, 0) for api in REQUEST_TYPES}

DECODERS = {api: msgspec.msgpack.Decoder(cls) for api, cls in REQUEST_TYPES.items()}
RESPONSE_DECODERS = {api: msgspec.msgpack.Decoder(cls) for api, cls in RESPONSE_TYPES.items()}
ENCODER = msgspec.msgpack.Encoder()

