"""Every error the data plane can return, with its stable wire code.

Codes follow Kafka's numbering where Kafka has the same error, so people and
tools that know Kafka read them the same way. Each class carries ``errno`` (the
wire code) and ``retriable`` (whether the same request may succeed if simply
sent again, perhaps after a metadata refresh).
"""

from __future__ import annotations

__all__ = [
    "BrokerError",
    "ConnectionClosedError",
    "CorruptRecordError",
    "ERRORS_BY_CODE",
    "TidewayError",
    "error_for_code",
]


class TidewayError(Exception):
    """Raised for any failure of the data plane; base of every error here."""

    errno = -1
    retriable = False
    name = "UNKNOWN_SERVER_ERROR"

    def __init__(self, message: str = "") -> None:
        super().__init__(message or self.__class__.__doc__ or self.name)
        self.message = message or self.name

    def __str__(self) -> str:
        return f"[{self.name}] {self.message}"


ERRORS_BY_CODE: dict[int, type[BrokerError]] = {}


class BrokerError(TidewayError):
    """Raised when a broker answers with an error code.

    Every subclass is registered under its ``errno`` as it is defined, so a
    wire code always decodes to its class.
    """

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        known = ERRORS_BY_CODE.setdefault(cls.errno, cls)
        assert known is cls, f"{cls.__name__} reuses error code {cls.errno} of {known.__name__}"


class UnknownServerError(BrokerError):
    """Raised when the broker hit an unexpected error (a bug): see its log."""

    errno = -1
    name = "UNKNOWN_SERVER_ERROR"


class OffsetOutOfRangeError(BrokerError):
    """Raised when a fetch asks for an offset below the log start or past the log end."""

    errno = 1
    name = "OFFSET_OUT_OF_RANGE"


class CorruptRecordError(BrokerError):
    """Raised when a record batch is malformed or fails its CRC."""

    errno = 2
    name = "CORRUPT_MESSAGE"

    def __init__(self, message: str = "", *, too_large: bool = False) -> None:
        super().__init__(message)
        self.too_large = too_large


class UnknownTopicOrPartitionError(BrokerError):
    """Raised when the topic or partition does not exist on this broker."""

    errno = 3
    name = "UNKNOWN_TOPIC_OR_PARTITION"
    retriable = True


class InvalidFetchSizeError(BrokerError):
    """Raised when a fetch asks for a negative or zero byte limit."""

    errno = 4
    name = "INVALID_FETCH_SIZE"


class LeaderNotAvailableError(BrokerError):
    """Raised when a partition has no leader right now (an election is under way)."""

    errno = 5
    name = "LEADER_NOT_AVAILABLE"
    retriable = True


class NotLeaderError(BrokerError):
    """Raised when this broker does not lead the partition: refresh metadata and retry."""

    errno = 6
    name = "NOT_LEADER_OR_FOLLOWER"
    retriable = True


class RequestTimedOutError(BrokerError):
    """Raised when the request did not complete within its timeout."""

    errno = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True


class MessageTooLargeError(BrokerError):
    """Raised when a batch or message is larger than the topic's max.message.bytes."""

    errno = 10
    name = "MESSAGE_TOO_LARGE"


class StaleControllerEpochError(BrokerError):
    """Raised when a controller request carries an older controller epoch."""

    errno = 11
    name = "STALE_CONTROLLER_EPOCH"


class InvalidTopicError(BrokerError):
    """Raised when a topic name is not valid."""

    errno = 17
    name = "INVALID_TOPIC_EXCEPTION"


class NotEnoughReplicasError(BrokerError):
    """Raised when acks=all and the in-sync replica set is below min.insync.replicas."""

    errno = 19
    name = "NOT_ENOUGH_REPLICAS"
    retriable = True


class InvalidRequiredAcksError(BrokerError):
    """Raised when acks is not 0, 1 or -1 (all)."""

    errno = 21
    name = "INVALID_REQUIRED_ACKS"


class UnsupportedVersionError(BrokerError):
    """Raised when the broker does not know the API or its version."""

    errno = 35
    name = "UNSUPPORTED_VERSION"


class TopicAlreadyExistsError(BrokerError):
    """Raised when creating a topic that exists."""

    errno = 36
    name = "TOPIC_ALREADY_EXISTS"


class InvalidPartitionsError(BrokerError):
    """Raised when a partition count is not a positive number within the limit."""

    errno = 37
    name = "INVALID_PARTITIONS"


class InvalidReplicationFactorError(BrokerError):
    """Raised when a replication factor cannot be satisfied by the live brokers."""

    errno = 38
    name = "INVALID_REPLICATION_FACTOR"


class InvalidConfigError(BrokerError):
    """Raised when a topic configuration value is unknown or out of range."""

    errno = 40
    name = "INVALID_CONFIG"


class InvalidRequestError(BrokerError):
    """Raised when a request is well framed but its body does not make sense."""

    errno = 42
    name = "INVALID_REQUEST"


class PolicyViolationError(BrokerError):
    """Raised when a request is valid but the tenant's plan does not allow it (a quota: queues, partitions,
    storage, retention, message size), or the cluster has no room for it."""

    errno = 44
    name = "POLICY_VIOLATION"


class StorageError(BrokerError):
    """Raised when the disk failed under a partition (full, read-only, I/O error)."""

    errno = 56
    name = "KAFKA_STORAGE_ERROR"
    retriable = True


class ConnectionClosedError(TidewayError):
    """Raised for requests in flight when their connection to a broker breaks."""

    errno = 13
    name = "NETWORK_EXCEPTION"
    retriable = True


class ClientTimeoutError(TidewayError):
    """Raised when the client gave up waiting for a broker's answer."""

    errno = 7
    name = "REQUEST_TIMED_OUT"
    retriable = True


def error_for_code(code: int, message: str = "") -> BrokerError:
    """Return the exception for a wire error code (UnknownServerError if unknown)."""
    cls = ERRORS_BY_CODE.get(code, UnknownServerError)
    return cls(message)


class NotEnoughReplicasAfterAppendError(BrokerError):
    """Raised when records were written but the ISR shrank below min.insync.replicas before they committed."""

    errno = 20
    name = "NOT_ENOUGH_REPLICAS_AFTER_APPEND"
    retriable = True


class FencedLeaderEpochError(BrokerError):
    """Raised when a request carries a leader epoch older than the partition's."""

    errno = 74
    name = "FENCED_LEADER_EPOCH"
    retriable = True


class UnknownLeaderEpochError(BrokerError):
    """Raised when a request carries a leader epoch newer than this broker knows."""

    errno = 75
    name = "UNKNOWN_LEADER_EPOCH"
    retriable = True


class NotControllerError(BrokerError):
    """Raised when a controller request reaches a controller that is not the active one."""

    errno = 41
    name = "NOT_CONTROLLER"
    retriable = True


class InvalidUpdateVersionError(BrokerError):
    """Raised when an ISR change names a partition epoch that is no longer current."""

    errno = 95
    name = "INVALID_UPDATE_VERSION"


class StaleBrokerEpochError(BrokerError):
    """Raised when a heartbeat comes from an earlier life of a broker (or before it registered)."""

    errno = 77
    name = "STALE_BROKER_EPOCH"
    retriable = True


class OutOfOrderSequenceError(BrokerError):
    """Raised when a producer's batch skips sequence numbers: an earlier batch is missing; resend in order."""

    errno = 45
    name = "OUT_OF_ORDER_SEQUENCE_NUMBER"
    retriable = True


class DuplicateSequenceError(BrokerError):
    """Raised when a batch repeats sequences written too long ago to know their offsets."""

    errno = 46
    name = "DUPLICATE_SEQUENCE_NUMBER"


class InvalidProducerEpochError(BrokerError):
    """Raised when a producer epoch is older than one already seen: a newer instance took over."""

    errno = 47
    name = "INVALID_PRODUCER_EPOCH"


class InvalidProducerIdMappingError(BrokerError):
    """Raised when a producer id is not the one its transactional id was given (InitProducerId first)."""

    errno = 49
    name = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(BrokerError):
    """Raised when a transaction timeout is outside what the coordinator allows."""

    errno = 50
    name = "INVALID_TRANSACTION_TIMEOUT"


class ConcurrentTransactionsError(BrokerError):
    """Raised when the producer's previous transaction is still being completed: ask again shortly."""

    errno = 51
    name = "CONCURRENT_TRANSACTIONS"
    retriable = True


class InvalidTxnStateError(BrokerError):
    """Raised when a transaction request does not fit the transaction's state (ending one never begun)."""

    errno = 48
    name = "INVALID_TXN_STATE"


class ProducerFencedError(BrokerError):
    """Raised when a newer instance of the producer (the same transactional id) took over: this one must stop."""

    errno = 90
    name = "PRODUCER_FENCED"


class TransactionalIdAuthorizationFailedError(BrokerError):
    """Raised when a key may not use transactions (it lacks the produce scope) or names another's transactional id."""

    errno = 53
    name = "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"


class UnstableOffsetCommitError(BrokerError):
    """Raised when a partition's offset is being committed by an open transaction: ask again once it ends."""

    errno = 88
    name = "UNSTABLE_OFFSET_COMMIT"
    retriable = True


class OperationNotAttemptedError(BrokerError):
    """Raised for parts of a request left undone because another part of it was refused."""

    errno = 55
    name = "OPERATION_NOT_ATTEMPTED"


class TransactionalIdNotFoundError(BrokerError):
    """Raised when a transactional id has no state at its coordinator."""

    errno = 105
    name = "TRANSACTIONAL_ID_NOT_FOUND"




class CoordinatorLoadInProgressError(BrokerError):
    """Raised when the group coordinator is still loading the group's state."""

    errno = 14
    name = "COORDINATOR_LOAD_IN_PROGRESS"
    retriable = True


class CoordinatorNotAvailableError(BrokerError):
    """Raised when no broker leads the group's partition of the internal topic yet."""

    errno = 15
    name = "COORDINATOR_NOT_AVAILABLE"
    retriable = True


class NotCoordinatorError(BrokerError):
    """Raised when this broker is not the coordinator of the group (find it again)."""

    errno = 16
    name = "NOT_COORDINATOR"
    retriable = True


class InconsistentGroupTypeError(BrokerError):
    """Raised when a group used as a stream group is used as a queue group, or the other way round."""

    errno = 23
    name = "INCONSISTENT_GROUP_PROTOCOL"


class GroupSubscribedToTopicError(BrokerError):
    """Raised when a group's positions on a topic are deleted while members of the group read that topic."""

    errno = 86
    name = "GROUP_SUBSCRIBED_TO_TOPIC"


class InvalidGroupIdError(BrokerError):
    """Raised when a group id is empty or malformed."""

    errno = 24
    name = "INVALID_GROUP_ID"


class UnknownMemberIdError(BrokerError):
    """Raised when the member is not (or no longer) in the group: rejoin."""

    errno = 25
    name = "UNKNOWN_MEMBER_ID"


class FencedMemberEpochError(BrokerError):
    """Raised when a member's epoch is not the coordinator's: drop every partition and rejoin."""

    errno = 110
    name = "FENCED_MEMBER_EPOCH"


class NotAssignedError(BrokerError):
    """Raised when a member commits an offset for a partition it does not own."""

    errno = 111
    name = "PARTITION_NOT_ASSIGNED"


class InvalidRecordStateError(BrokerError):
    """Raised when a receipt is no longer valid: its lock expired, or the record was acknowledged or redelivered."""

    errno = 121
    name = "INVALID_RECORD_STATE"


class TopicAuthorizationFailedError(BrokerError):
    """Raised when the caller may not touch a topic (another scope, or a name outside its key's patterns)."""

    errno = 29
    name = "TOPIC_AUTHORIZATION_FAILED"


class GroupAuthorizationFailedError(BrokerError):
    """Raised when the caller may not use a group (its key lacks the consume scope)."""

    errno = 30
    name = "GROUP_AUTHORIZATION_FAILED"


class AuthorizationFailedError(BrokerError):
    """Raised when the caller may not use this API at all (internal APIs, topic admin by a tenant)."""

    errno = 31
    name = "AUTHORIZATION_FAILED"


class UnsupportedSaslMechanismError(BrokerError):
    """Raised when a listener does not take the authentication mechanism asked for."""

    errno = 33
    name = "UNSUPPORTED_SASL_MECHANISM"


class SaslAuthenticationFailedError(BrokerError):
    """Raised when credentials are missing, malformed, wrong or revoked: the broker then closes the connection."""

    errno = 58
    name = "SASL_AUTHENTICATION_FAILED"


# -- Tideway's own codes (no Kafka error means the same): from 1000 up ------------------------------


class AuthenticationUnavailableError(SaslAuthenticationFailedError):
    """Raised when an API key cannot be checked right now (the controller is away and this broker has not seen the
    key): the connection is closed, and the same key may succeed if the client simply tries again."""

    errno = 1000
    name = "AUTHENTICATION_UNAVAILABLE"
    retriable = True


class BrokerBusyError(BrokerError):
    """Raised when a request cannot be taken now because the broker already holds as many bytes of requests in
    progress as it allows (in all or for this caller): the same request may succeed a moment later."""

    errno = 1001
    name = "BROKER_BUSY"
    retriable = True
