"""A tenant's topic admin that a broker forwards (Kafka's CreateTopics, DeleteTopics, CreatePartitions, or the
native ones sent with a tenant's key): the REST API's validation, the plan's quotas and the same actions.

The controller calls these (in a thread of its own: the actions change the cluster through the brokers, which
ask the controller) with the tenant id the broker's authorizer set and the tenant's broker-side topic names.
Each answer is the native one, per topic, with Kafka's error codes: a queue that exists is
TOPIC_ALREADY_EXISTS, a quota POLICY_VIOLATION, a bad name INVALID_TOPIC_EXCEPTION, a bad setting INVALID_CONFIG.

Kafka's topic settings map onto a queue's: ``retention.ms``, ``retention.bytes`` (per partition, as in Kafka),
``cleanup.policy`` (``compact`` keeps retention too), ``max.message.bytes``; ``tideway.mode`` (``stream``, the
default for a Kafka client, or ``queue``) chooses the model. Any other setting is refused, so nothing a client
asked for is silently ignored.
"""

from __future__ import annotations

import logging

from django.db import close_old_connections
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants.models import Tenant
from tideway_server.topics import actions
from tideway_server.topics.api.serializers import QueueSerializer
from tideway_server.topics.choices import QueueMode
from tideway_server.topics.models import Queue

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.names import TenantNames

__all__ = ["create_queues", "delete_queues", "grow_queue"]

log = logging.getLogger(__name__)

# Kafka's topic settings -> the queue field each sets, and how its value reads.
SETTINGS = {
    "retention.ms": ("retention_ms", int),
    "retention.bytes": ("retention_bytes", int),
    "max.message.bytes": ("max_message_bytes", int),
    "cleanup.policy": ("compaction", lambda value: "compact" in value.split(",")),
    "tideway.mode": ("mode", str),
}
_FIELD_SETTING = {field: setting for setting, (field, _) in SETTINGS.items()}
_FIELD_ERRORS = {"name": errors.InvalidTopicError, "partitions": errors.InvalidPartitionsError,
                 "replication_factor": errors.InvalidReplicationFactorError}
_ACTION_ERRORS = {"queue_exists": errors.TopicAlreadyExistsError, "no_capacity": errors.PolicyViolationError,
                  "quota_exceeded": errors.PolicyViolationError, "cluster_error": errors.InvalidRequestError,
                  "partitions_cannot_shrink": errors.InvalidPartitionsError, "queue_busy": errors.InvalidRequestError,
                  "cluster_unavailable": errors.LeaderNotAvailableError}


def create_queues(tenant_id: int, acting: str, cluster, request: m.CreateTopicsRequest) -> m.CreateTopicsResponse:
    """Each topic as a queue of the tenant on ``cluster`` (the one the asking broker belongs to)."""
    try:
        tenant = _tenant(tenant_id)
        results = []
        for topic in request.topics:
            results.append(_each(topic.name, lambda name, topic=topic: _create(
                tenant, acting, cluster, name, topic, request.validate_only), tenant_id))
        return m.CreateTopicsResponse(topics=results)
    finally:
        close_old_connections()


def delete_queues(tenant_id: int, acting: str, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse:
    try:
        tenant = _tenant(tenant_id)
        return m.DeleteTopicsResponse(topics=[
            _each(name, lambda own: actions.do_delete_queue(_queue(tenant, own), acting=acting), tenant_id)
            for name in request.names])
    finally:
        close_old_connections()


def grow_queue(tenant_id: int, acting: str, request: m.CreatePartitionsRequest) -> m.CreatePartitionsResponse:
    """CreatePartitions: the queue's new partition count, checked against the plan as a REST update is."""
    try:
        tenant = _tenant(tenant_id)
        result = _each(request.topic, lambda own: _grow(tenant, acting, own, request), tenant_id)
        return m.CreatePartitionsResponse(error_code=result.error_code, error_message=result.error_message)
    finally:
        close_old_connections()


def _tenant(tenant_id: int) -> Tenant:
    tenant = Tenant.objects.select_related("plan", "dedicated_cluster").filter(pk=tenant_id).first()
    if tenant is None:
        raise errors.AuthorizationFailedError(f"tenant {tenant_id} does not exist")
    return tenant


def _queue(tenant: Tenant, name: str) -> Queue:
    queue = Queue.objects.filter(tenant=tenant, name=name).select_related("cluster", "tenant", "tenant__plan").first()
    if queue is None:
        raise errors.UnknownTopicOrPartitionError(f"queue {name!r} does not exist")
    return queue


def _each(broker_name: str, do, tenant_id: int) -> m.TopicResult:
    """``do(own name)`` for one topic, its outcome as a TopicResult under the broker-side name."""
    result = m.TopicResult(name=broker_name)
    try:
        own = TenantNames(tenant_id).own_topic(broker_name)
        if own is None:
            raise errors.TopicAuthorizationFailedError(f"{broker_name!r} is not the tenant's")
        do(own)
    except errors.BrokerError as exc:
        result.error_code, result.error_message = exc.errno, exc.message
    except ActionError as exc:
        error = _ACTION_ERRORS.get(exc.code, errors.InvalidRequestError)
        result.error_code, result.error_message = error.errno, exc.message
    except Exception as exc:  # noqa: BLE001 - the cluster refused or failed: the action undid its row
        log.warning("a tenant's topic admin on %s failed", broker_name, exc_info=True)
        result.error_code, result.error_message = errors.UnknownServerError.errno, f"{type(exc).__name__}: {exc}"
    return result


def _create(tenant: Tenant, acting: str, cluster, name: str, topic: m.NewTopic, validate_only: bool) -> None:
    values: dict = {"name": name, "mode": QueueMode.STREAM}
    if topic.partitions != -1:
        values["partitions"] = topic.partitions
    if topic.replication_factor != -1:
        values["replication_factor"] = topic.replication_factor
    for setting, value in topic.configs.items():
        if setting not in SETTINGS:
            raise errors.InvalidConfigError(
                f"setting {setting!r} is not one a Tideway queue takes ({', '.join(sorted(SETTINGS))})")
        field, read = SETTINGS[setting]
        try:
            values[field] = read(value)
        except ValueError:
            raise errors.InvalidConfigError(f"{setting}={value!r} is not a number") from None
    body = QueueSerializer(data=values)
    if not body.is_valid():
        field, problems = next(iter(body.errors.items()))
        error = _FIELD_ERRORS.get(field, errors.InvalidConfigError)
        raise error(f"{_FIELD_SETTING.get(field, field)}: {' '.join(str(p) for p in problems)}")
    actions.do_create_queue(tenant, body.validated_data, acting=acting, cluster=cluster, validate_only=validate_only)


def _grow(tenant: Tenant, acting: str, name: str, request: m.CreatePartitionsRequest) -> None:
    queue = _queue(tenant, name)
    if request.count <= queue.partitions:
        raise errors.InvalidPartitionsError(f"queue {name!r} has {queue.partitions} partitions; the count only grows")
    if request.validate_only:
        actions.check_update_queue(queue, {"partitions": request.count})
        return
    actions.do_update_queue(queue, {"partitions": request.count}, acting=acting)
