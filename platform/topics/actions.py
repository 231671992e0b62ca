"""Every change to queues and topics: one ``do_*`` function each.

The database row (with quota checks under the tenant's row lock, and the
audit entry) is written in one transaction; the broker cluster is changed
after it commits, never while a transaction is open (the controller writes
to the same database, and SQLite would wait on us). If the cluster refuses,
the row goes back to what it was and the caller gets the cluster's error.
"""

from __future__ import annotations

import logging

from django.db import transaction
from django.db.models import BigIntegerField, Count, F, Sum
from tideway_server.clusters import admin
from tideway_server.clusters.choices import BrokerState
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants import audit
from tideway_server.tenants.models import Tenant
from tideway_server.topics.choices import QueueMode, QueueStatus
from tideway_server.topics.models import Queue
from tideway_server.topics.placement import check_cluster, choose_cluster
from tideway_server.topics.quotas import Footprint, check_queue_fits
from tideway_server.topics.settings import broker_configs, dead_letter_configs

from tideway.protocol import errors as broker_errors

log = logging.getLogger(__name__)

# Settings fixed at creation (as in Kafka and SQS): changing them would need data to move.
IMMUTABLE = ("mode", "replication_factor", "fifo")
def footprint(tenant: Tenant, *, excluding: Queue | None = None) -> Footprint:
    rows = Queue.objects.filter(tenant=tenant)
    if excluding is not None:
        rows = rows.exclude(pk=excluding.pk)
    totals = rows.aggregate(queue_count=Count("id"), partition_total=Sum("partitions"),
                            storage_total=Sum(F("partitions") * F("retention_bytes"), output_field=BigIntegerField()))
    return Footprint(totals["queue_count"] or 0, totals["partition_total"] or 0, totals["storage_total"] or 0)


def quota_use(tenant: Tenant) -> list[dict]:
    """Each quota of the tenant's plan with what is used of it: name, used, limit, percent (the console's bars and the
    ``quota_use`` alert metric)."""
    plan = tenant.plan
    used = footprint(tenant)
    quotas = [("queues", used.queues, plan.max_queues), ("partitions", used.partitions, plan.max_partitions),
              ("reserved storage (bytes)", used.storage_bytes, plan.max_storage_bytes)]
    return [{"name": name, "used": value, "limit": limit, "percent": min(100, round(100 * value / limit)) if limit else 0}
            for name, value, limit in quotas]


def partition_states(queue: Queue) -> dict[int, dict]:
    """The queue's partitions as their leaders report them (first offset, high watermark, log end, size,
    segments), by partition; partitions whose leader did not answer are missing."""
    return admin.partition_states(queue.cluster, queue.broker_topic)


def _lock_tenant(tenant: Tenant) -> None:
    """Serialise a tenant's quota checks (inside the caller's transaction)."""
    Tenant.objects.select_for_update().filter(pk=tenant.pk).first()


def _check_quotas(tenant: Tenant, queue: Queue, *, new_queue: bool) -> None:
    check_queue_fits(
        tenant.plan, footprint(tenant, excluding=None if new_queue else queue),
        partitions=queue.partitions, retention_bytes=queue.retention_bytes, retention_ms=queue.retention_ms,
        max_message_bytes=queue.max_message_bytes, new_queue=new_queue,
    )


def _check_schema(tenant: Tenant, subject: str) -> None:
    if not subject:
        return
    from tideway_server.registry.models import SubjectVersion

    if not SubjectVersion.objects.filter(tenant=tenant, subject=subject, deleted=False).exists():
        raise ActionError("unknown_schema_subject", f"schema subject {subject!r} has no registered version")


def do_create_queue(tenant: Tenant, values: dict, *, acting: str, cluster=None, validate_only: bool = False) -> Queue:
    """Create a queue: row and quotas first, then the topic (and dead-letter topic) on a cluster: ``cluster``
    when the caller names it (a broker's Kafka client creates where it is connected), else the placement's
    choice. ``validate_only``: every check, then nothing is written (Kafka's validate_only)."""
    plan = tenant.plan
    name = values["name"]
    partitions = values.get("partitions") or 1
    with transaction.atomic():
        _lock_tenant(tenant)
        if Queue.objects.filter(tenant=tenant, name=name).exists():
            raise ActionError("queue_exists", f"queue {name!r} already exists")
        cluster = choose_cluster(tenant, partitions) if cluster is None else check_cluster(tenant, cluster, partitions)
        live = cluster.brokers.filter(state=BrokerState.ALIVE).count() or len([a for a in cluster.bootstrap.split(",") if a])
        queue = Queue(
            tenant=tenant, name=name, cluster=cluster, broker_topic=f"t{tenant.pk}.{name}",
            mode=values.get("mode") or QueueMode.QUEUE,
            partitions=partitions,
            replication_factor=values.get("replication_factor") or max(1, min(3, live)),
            retention_ms=values["retention_ms"] if values.get("retention_ms") is not None else min(7 * 24 * 3600 * 1000, plan.max_retention_ms),
            retention_bytes=values["retention_bytes"] if values.get("retention_bytes") is not None else plan.default_retention_bytes,
            max_message_bytes=values.get("max_message_bytes") or min(1 << 20, plan.max_message_bytes),
            status=QueueStatus.CREATING,
        )
        for field in ("compaction", "visibility_timeout_ms", "max_deliveries", "delivery_delay_ms", "fifo",
                      "schema_subject", "schema_encoding", "sqs_settings", "dead_letter_queue_id"):
            if values.get(field) is not None:
                setattr(queue, field, values[field])
        if live and queue.replication_factor > live:
            raise ActionError("invalid_request", f"the cluster has {live} broker{'s' if live != 1 else ''}: at most "
                              f"{live} replica{'s' if live != 1 else ''}", details={"field": "replication_factor"})
        _check_quotas(tenant, queue, new_queue=True)
        _check_schema(tenant, queue.schema_subject)
        if validate_only:
            return queue
        queue.save()
    try:
        admin.create_topic(cluster, queue.broker_topic, partitions=queue.partitions,
                           replication_factor=queue.replication_factor, configs=broker_configs(queue))
        if queue.mode == QueueMode.QUEUE:
            admin.create_topic(cluster, queue.dead_letter_topic, partitions=queue.partitions,
                               replication_factor=queue.replication_factor, configs=dead_letter_configs(queue))
    except Exception as exc:
        log.warning("creating queue %s on cluster %s failed; undoing", queue, cluster, exc_info=True)
        try:
            _delete_topics(queue)
        except Exception as cleanup:  # the row goes anyway: a topic left behind is not the tenant's
            log.warning("could not delete the topics of the failed queue %s: %s", queue, cleanup)
        queue.delete()  # never existed for the tenant: no audit entry (the log has the failure)
        _raise_as_action_error(exc)
    with transaction.atomic():
        queue.status = QueueStatus.READY
        queue.save(update_fields=["status"])
        audit.record(tenant, acting, "queue.create", name, **_audit_values(queue))
    return queue


def _raise_as_action_error(exc: Exception) -> None:
    """Raise what the caller is told when the cluster refused a change (``cluster_error``, in the cluster's own
    words: the console shows it on the form, the API answers 502), or ``exc`` itself when it was something else."""
    if isinstance(exc, broker_errors.BrokerError):
        raise ActionError("cluster_error", f"the broker cluster refused the change: {exc.message}") from exc
    raise exc


def _changes(queue: Queue, values: dict) -> dict:
    """The settings ``values`` change, once each may change (ActionError when one may not)."""
    for field in IMMUTABLE + ("name",):
        if field in values and values[field] is not None and values[field] != getattr(queue, field):
            raise ActionError("immutable_setting", f"{field} cannot change after a queue is created",
                              details={"field": field})
    if queue.status != QueueStatus.READY:
        raise ActionError("queue_busy", f"queue {queue.name!r} is {queue.status}")
    changed = {f: v for f, v in values.items()
               if f in _MUTABLE and (v is not None or f in _NULLABLE) and v != getattr(queue, f)}
    if "partitions" in changed and changed["partitions"] < queue.partitions:
        raise ActionError("partitions_cannot_shrink", f"queue {queue.name!r} has {queue.partitions} partitions; "
                          "the count can only grow", details={"field": "partitions"})
    return changed


def check_update_queue(queue: Queue, values: dict) -> None:
    """Raise what ``do_update_queue(queue, values)`` would refuse; change nothing (Kafka's validate_only)."""
    changed = _changes(queue, values)
    with transaction.atomic():
        _lock_tenant(queue.tenant)
        for field, value in changed.items():
            setattr(queue, field, value)
        try:
            _check_quotas(queue.tenant, queue, new_queue=False)
            _check_schema(queue.tenant, queue.schema_subject)
        finally:
            queue.refresh_from_db()


def do_update_queue(queue: Queue, values: dict, *, acting: str) -> Queue:
    """Change what may change: partitions (grow only), retention, sizes, queue settings, schema."""
    old = {field: getattr(queue, field) for field in _MUTABLE}
    changed = _changes(queue, values)
    if not changed:
        return queue
    tenant = queue.tenant
    with transaction.atomic():
        _lock_tenant(tenant)
        for field, value in changed.items():
            setattr(queue, field, value)
        _check_quotas(tenant, queue, new_queue=False)
        _check_schema(tenant, queue.schema_subject)
        queue.save()
        audit.record(tenant, acting, "queue.update", queue.name, **{f: [old[f], v] for f, v in changed.items()})
    try:
        if "partitions" in changed:
            admin.create_partitions(queue.cluster, queue.broker_topic, queue.partitions)
            if queue.mode == QueueMode.QUEUE:
                admin.create_partitions(queue.cluster, queue.dead_letter_topic, queue.partitions)
        admin.alter_configs(queue.cluster, queue.broker_topic, set=broker_configs(queue), delete=[])
        if queue.mode == QueueMode.QUEUE:
            admin.alter_configs(queue.cluster, queue.dead_letter_topic, set=dead_letter_configs(queue), delete=[])
    except Exception as exc:
        log.warning("changing queue %s on its cluster failed; restoring its settings", queue, exc_info=True)
        for field, value in old.items():
            if field != "partitions":  # partitions that were created stay: they never shrink
                setattr(queue, field, value)
        queue.save()
        _raise_as_action_error(exc)
    return queue


def do_delete_queue(queue: Queue, *, acting: str) -> None:
    """Delete a queue and its data (topic and dead-letter topic) from the brokers. Queues whose dead letters went
    to it send them to their own dead-letter topics again."""
    with transaction.atomic():
        queue.status = QueueStatus.DELETING
        queue.save(update_fields=["status"])
        audit.record(queue.tenant, acting, "queue.delete", queue.name, broker_topic=queue.broker_topic)
    for source in list(queue.dead_letter_sources.select_related("cluster")):
        do_update_queue(source, {"dead_letter_queue_id": None}, acting=acting)
    _delete_topics(queue)
    queue.delete()


def _delete_topics(queue: Queue) -> None:
    for topic in (queue.broker_topic, queue.dead_letter_topic):
        try:
            admin.delete_topic(queue.cluster, topic)
        except broker_errors.UnknownTopicOrPartitionError:
            pass  # never created, or already gone


_MUTABLE = ("partitions", "retention_ms", "retention_bytes", "compaction", "max_message_bytes", "visibility_timeout_ms",
            "max_deliveries", "delivery_delay_ms", "schema_subject", "schema_encoding", "sqs_settings",
            "dead_letter_queue_id")
_NULLABLE = ("dead_letter_queue_id",)  # None is a value of these (no dead-letter queue), not "unchanged"


def _audit_values(queue: Queue) -> dict:
    return {f: getattr(queue, f) for f in ("mode", "partitions", "replication_factor", "retention_ms", "retention_bytes",
                                            "compaction", "max_message_bytes", "fifo", "schema_subject")}
