"""Every change the controller makes to cluster state, one function each.

Each ``do_*`` runs in one transaction that first renews the controller's
lease with a conditional UPDATE (holder, epoch, unexpired). A controller that
lost its lease therefore cannot change anything: the guard raises LostLease
and the transaction rolls back. Callers push the new state to the brokers
after the transaction commits.

These functions are synchronous (Django ORM); the controller runs them on its
single database thread.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import timedelta

from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone
from tideway_server.brokers.storage.config import TopicConfig, altered_settings, validate_topic_name
from tideway_server.clusters.choices import BrokerState
from tideway_server.clusters.controller.placement import assign_replicas
from tideway_server.clusters.models import Broker, Cluster, ControllerLease, Partition, Topic

from tideway.protocol import errors
from tideway.protocol import messages as m

log = logging.getLogger(__name__)


class LostLease(Exception):
    """Raised when this controller no longer holds the lease: it must stop acting."""


@dataclass(frozen=True)
class Lease:
    """What proves this process is the active controller."""

    cluster_id: int
    holder: str
    epoch: int
    ttl_s: float


# -- the lease --------------------------------------------------------------------------------


def get_or_create_cluster(name: str) -> Cluster:
    cluster, _ = Cluster.objects.get_or_create(name=name)
    return cluster


def try_acquire_lease(cluster: Cluster, *, holder: str, address: str, ttl_s: float) -> Lease | None:
    """Take the lease if nobody holds it or it expired; the epoch grows by one."""
    now = timezone.now()
    try:
        ControllerLease.objects.get_or_create(cluster=cluster)
    except IntegrityError:
        pass  # another controller created it at the same moment
    with transaction.atomic():
        taken = (
            ControllerLease.objects.filter(cluster=cluster)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__lt=now))
            .update(holder=holder, address=address, epoch=F("epoch") + 1, expires_at=now + timedelta(seconds=ttl_s))
        )
        if not taken:
            return None
        epoch = ControllerLease.objects.get(cluster=cluster).epoch
    return Lease(cluster.id, holder, epoch, ttl_s)


def renew_lease(lease: Lease) -> None:
    """Extend the lease; raise LostLease if another controller took it."""
    now = timezone.now()
    renewed = ControllerLease.objects.filter(
        cluster_id=lease.cluster_id, holder=lease.holder, epoch=lease.epoch, expires_at__gt=now
    ).update(expires_at=now + timedelta(seconds=lease.ttl_s))
    if renewed != 1:
        raise LostLease(f"lease epoch {lease.epoch} is no longer held by {lease.holder}")


def release_lease(lease: Lease) -> None:
    ControllerLease.objects.filter(cluster_id=lease.cluster_id, holder=lease.holder, epoch=lease.epoch).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )


def current_lease(cluster: Cluster) -> ControllerLease | None:
    return ControllerLease.objects.filter(cluster=cluster).first()


# -- brokers -------------------------------------------------------------------------------------


def do_register_broker(lease: Lease, *, broker_id: int, host: str, port: int, rack: str | None,
                       internal_host: str = "", internal_port: int = -1, kafka_host: str = "",
                       kafka_port: int = -1) -> int:
    """A broker (re)started: mark it alive with a new broker epoch; revive offline partitions."""
    with transaction.atomic():
        renew_lease(lease)
        broker, _ = Broker.objects.select_for_update().get_or_create(
            cluster_id=lease.cluster_id, broker_id=broker_id, defaults={"host": host, "port": port}
        )
        broker.host, broker.port, broker.rack = host, port, rack or ""
        broker.internal_host, broker.internal_port = internal_host, internal_port
        broker.kafka_host, broker.kafka_port = kafka_host, kafka_port
        broker.state = BrokerState.ALIVE
        broker.broker_epoch += 1
        broker.last_heartbeat = timezone.now()
        broker.save()
        for partition in _partitions(lease).filter(leader=-1):
            if broker_id in partition.isr:
                _set_leader(partition, broker_id, partition.isr)
                log.info("%s: broker %d is back and leads it in epoch %d", partition, broker_id, partition.leader_epoch)
        return broker.broker_epoch


def record_heartbeats(lease: Lease, broker_ids: list[int]) -> None:
    """Write when live brokers were last heard from (shown to operators; liveness itself is in memory)."""
    Broker.objects.filter(cluster_id=lease.cluster_id, broker_id__in=broker_ids).update(last_heartbeat=timezone.now())


def do_fence_broker(lease: Lease, broker_id: int) -> list[str]:
    """A broker's session expired: move its leaderships and take it out of every ISR."""
    moved = []
    with transaction.atomic():
        renew_lease(lease)
        Broker.objects.filter(cluster_id=lease.cluster_id, broker_id=broker_id).update(state=BrokerState.FENCED)
        alive = _alive_ids(lease)
        for partition in _partitions(lease):
            if broker_id not in partition.replicas:
                continue
            isr = [r for r in partition.isr if r != broker_id]
            if partition.leader == broker_id:
                candidates = [r for r in partition.replicas if r in isr and r in alive]
                if candidates:
                    _set_leader(partition, candidates[0], isr)
                    moved.append(f"{partition} -> {candidates[0]}")
                else:
                    # Unclean election is off: wait, offline, for an ISR member to return.
                    _set_leader(partition, -1, partition.isr)
                    moved.append(f"{partition} -> offline")
            elif broker_id in partition.isr:
                partition.isr = isr
                partition.partition_epoch += 1
                partition.save(update_fields=["isr", "partition_epoch"])
    return moved


def do_alter_isr(lease: Lease, request: m.AlterIsrRequest) -> m.PartitionState:
    """A leader asks to shrink or expand its ISR; the controller decides."""
    with transaction.atomic():
        renew_lease(lease)
        partition = _locked_partition(lease, request.topic, request.partition)
        if partition.leader != request.broker_id or partition.leader_epoch != request.leader_epoch:
            raise errors.FencedLeaderEpochError(
                f"broker {request.broker_id} in epoch {request.leader_epoch} is not the leader of {partition} "
                f"(leader {partition.leader}, epoch {partition.leader_epoch})"
            )
        if partition.partition_epoch != request.partition_epoch:
            raise errors.InvalidUpdateVersionError(
                f"{partition} is at partition epoch {partition.partition_epoch}, not {request.partition_epoch}"
            )
        new_isr = sorted(set(request.new_isr), key=partition.replicas.index) if set(request.new_isr) <= set(partition.replicas) else None
        if new_isr is None or partition.leader not in new_isr:
            raise errors.InvalidRequestError(f"ISR {request.new_isr} must hold the leader and only replicas of {partition}")
        alive = _alive_ids(lease)
        added = [r for r in new_isr if r not in partition.isr and r not in alive]
        if added:
            raise errors.InvalidRequestError(f"brokers {added} are fenced and cannot join the ISR of {partition}")
        partition.isr = new_isr
        partition.partition_epoch += 1
        partition.save(update_fields=["isr", "partition_epoch"])
        log.info("%s: ISR now %s (partition epoch %d)", partition, new_isr, partition.partition_epoch)
        return _state(partition)


def do_replica_damaged(lease: Lease, request: m.ReplicaDamagedRequest) -> m.PartitionState:
    """A broker found a batch failing its CRC in its replica: out of the ISR, and out of leadership.

    It refetches from the new leader and rejoins the ISR the usual way (its
    leader re-admits it once it has caught up). When no other live in-sync
    replica exists, nothing better can lead: the answer says so and the
    partition stays as it is (its damaged batch is refused to readers).
    """
    with transaction.atomic():
        renew_lease(lease)
        partition = _locked_partition(lease, request.topic, request.partition)
        broker_id = request.broker_id
        if broker_id not in partition.isr:
            return _state(partition)  # already out: it catches up like any follower
        alive = _alive_ids(lease)
        healthy = [r for r in partition.replicas if r in partition.isr and r != broker_id and r in alive]
        isr = [r for r in partition.isr if r != broker_id]
        if partition.leader == broker_id:
            if not healthy:
                raise errors.NotEnoughReplicasError(
                    f"{partition}: broker {broker_id} holds a corrupt batch from offset {request.offset} and no other "
                    "live in-sync replica can take over; the batch cannot be repaired"
                )
            _set_leader(partition, healthy[0], isr)
        else:
            partition.isr = isr
            partition.partition_epoch += 1
            partition.save(update_fields=["isr", "partition_epoch"])
        log.warning("%s: broker %d found a corrupt batch from offset %d (%s); ISR now %s, leader %d",
                    partition, broker_id, request.offset, request.reason, partition.isr, partition.leader)
        return _state(partition)


def do_preferred_leader_election(lease: Lease) -> list[str]:
    """Give leadership back to each partition's first replica when it is alive and in sync."""
    moved = []
    with transaction.atomic():
        renew_lease(lease)
        alive = _alive_ids(lease)
        for partition in _partitions(lease):
            preferred = partition.replicas[0] if partition.replicas else -1
            if partition.leader != preferred and preferred in alive and preferred in partition.isr:
                _set_leader(partition, preferred, partition.isr)
                moved.append(f"{partition} -> {preferred}")
    return moved


# -- topics ---------------------------------------------------------------------------------------


def do_create_topic(lease: Lease, topic: m.NewTopic) -> None:
    validate_topic_name(topic.name)
    TopicConfig.from_settings(topic.partitions, topic.replication_factor, topic.configs)  # raises on bad settings
    with transaction.atomic():
        renew_lease(lease)
        if Topic.objects.filter(cluster_id=lease.cluster_id, name=topic.name).exists():
            raise errors.TopicAlreadyExistsError(f"topic {topic.name!r} already exists")
        brokers = [(b.broker_id, b.rack) for b in Broker.objects.filter(cluster_id=lease.cluster_id, state=BrokerState.ALIVE)]
        try:
            placement = assign_replicas(brokers, topic.partitions, topic.replication_factor, start=random.randrange(max(len(brokers), 1)))
        except ValueError as exc:
            raise errors.InvalidReplicationFactorError(str(exc)) from None
        row = Topic.objects.create(
            cluster_id=lease.cluster_id,
            name=topic.name,
            partition_count=topic.partitions,
            replication_factor=topic.replication_factor,
            configs=dict(topic.configs),
        )
        Partition.objects.bulk_create(
            Partition(topic=row, index=i, replicas=replicas, isr=list(replicas), leader=replicas[0], leader_epoch=0, partition_epoch=0)
            for i, replicas in enumerate(placement)
        )
    log.info("created topic %s: %d partitions, replication factor %d", topic.name, topic.partitions, topic.replication_factor)


def do_create_partitions(lease: Lease, name: str, count: int) -> None:
    """Grow a topic to ``count`` partitions (partitions never shrink)."""
    with transaction.atomic():
        renew_lease(lease)
        try:
            topic = Topic.objects.select_for_update().get(cluster_id=lease.cluster_id, name=name)
        except Topic.DoesNotExist:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        if count <= topic.partition_count:
            raise errors.InvalidPartitionsError(
                f"topic {name!r} has {topic.partition_count} partitions; the new count must be larger (partitions never shrink)"
            )
        TopicConfig.from_settings(count, topic.replication_factor, topic.configs)
        brokers = [(b.broker_id, b.rack) for b in Broker.objects.filter(cluster_id=lease.cluster_id, state=BrokerState.ALIVE)]
        try:
            placement = assign_replicas(brokers, count - topic.partition_count, topic.replication_factor, start=topic.partition_count)
        except ValueError as exc:
            raise errors.InvalidReplicationFactorError(str(exc)) from None
        Partition.objects.bulk_create(
            Partition(topic=topic, index=topic.partition_count + i, replicas=replicas, isr=list(replicas), leader=replicas[0])
            for i, replicas in enumerate(placement)
        )
        old_count, topic.partition_count = topic.partition_count, count
        topic.save(update_fields=["partition_count"])
    log.info("topic %s grew from %d to %d partitions", name, old_count, count)


def do_alter_configs(lease: Lease, name: str, new: dict[str, str], removed: list[str]) -> dict[str, str]:
    """Change a topic's settings; brokers apply them when the controller next pushes its state."""
    with transaction.atomic():
        renew_lease(lease)
        try:
            topic = Topic.objects.select_for_update().get(cluster_id=lease.cluster_id, name=name)
        except Topic.DoesNotExist:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist") from None
        settings = altered_settings(topic.configs, new, removed)
        config = TopicConfig.from_settings(topic.partition_count, topic.replication_factor, settings)  # raises on bad settings
        topic.configs = settings
        topic.save(update_fields=["configs"])
    log.info("topic %s settings changed: set %s, reset %s", name, new, removed)
    return config.to_settings()


def do_delete_topic(lease: Lease, name: str) -> None:
    with transaction.atomic():
        renew_lease(lease)
        deleted, _ = Topic.objects.filter(cluster_id=lease.cluster_id, name=name).delete()
        if not deleted:
            raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
    log.info("deleted topic %s", name)


# -- reading state ----------------------------------------------------------------------------------


def snapshot(lease: Lease, controller_id: int = 0, *, topics: list[str] | None = None) -> m.ClusterStateRequest:
    """The cluster as brokers need it (for CLUSTER_STATE): every broker, and every topic or only ``topics``.

    Brokers apply what a request names and keep the rest, so a push of the
    topics that changed is enough for a change.
    """
    brokers = Broker.objects.filter(cluster_id=lease.cluster_id)
    topic_rows = Topic.objects.filter(cluster_id=lease.cluster_id)
    partition_rows = _partitions(lease).select_related("topic")
    if topics is not None:
        topic_rows = topic_rows.filter(name__in=topics)
        partition_rows = partition_rows.filter(topic__name__in=topics)
    topics = list(topic_rows)
    partitions = list(partition_rows)
    return m.ClusterStateRequest(
        controller_id=controller_id,
        controller_epoch=lease.epoch,
        brokers=[m.BrokerInfo(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack or None) for b in brokers],
        internal_listeners=[m.ListenerAddress(node_id=b.broker_id, host=b.internal_host, port=b.internal_port)
                            for b in brokers if b.internal_port >= 0],
        kafka_listeners=[m.ListenerAddress(node_id=b.broker_id, host=b.kafka_host, port=b.kafka_port)
                         for b in brokers if b.kafka_port >= 0],
        topics=[m.TopicState(name=t.name, partitions=t.partition_count, replication_factor=t.replication_factor, configs=t.configs) for t in topics],
        partitions=[_state(p) for p in partitions],
    )


def describe(lease: Lease) -> m.DescribeClusterResponse:
    state = snapshot(lease)
    brokers = [
        m.BrokerStatus(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack or None, state=b.state,
                       internal_host=b.internal_host, internal_port=b.internal_port, kafka_host=b.kafka_host,
                       kafka_port=b.kafka_port)
        for b in Broker.objects.filter(cluster_id=lease.cluster_id)
    ]
    return m.DescribeClusterResponse(
        controller_id=lease.holder, controller_epoch=lease.epoch, brokers=brokers, topics=state.topics, partitions=state.partitions
    )


def describe_credential(prefix: str) -> m.DescribeCredentialResponse:
    """What a broker needs to check an API key: its secret's digest, tenant, scopes, patterns, revocation."""
    from tideway_server.tenants.models import ApiKey

    row = (ApiKey.objects.filter(prefix=prefix).select_related("tenant__plan")
           .only("tenant_id", "secret_sha256", "scopes", "queue_patterns", "revoked_at", "expires_at", "tenant__suspended_at",
                 "tenant__plan__max_connections_per_key", "tenant__plan__max_publish_bytes_per_s",
                 "tenant__plan__max_consume_bytes_per_s").first())
    if row is None:
        return m.DescribeCredentialResponse(found=False)
    return m.DescribeCredentialResponse(
        found=True, tenant_id=row.tenant_id, secret_sha256=row.secret_sha256, scopes=list(row.scopes),
        queue_patterns=list(row.queue_patterns),
        # an expired key, and a suspended tenant's keys, are refused like revoked ones
        revoked=row.refusal(timezone.now()) is not None or row.tenant.suspended_at is not None,
        connections_max=row.tenant.plan.max_connections_per_key,
        publish_bytes_per_s=row.tenant.plan.max_publish_bytes_per_s,
        consume_bytes_per_s=row.tenant.plan.max_consume_bytes_per_s,
    )


def alive_broker_ids(lease: Lease) -> set[int]:
    return _alive_ids(lease)


# -- helpers ------------------------------------------------------------------------------------------


def _partitions(lease: Lease):
    return Partition.objects.filter(topic__cluster_id=lease.cluster_id)


def _locked_partition(lease: Lease, topic: str, index: int) -> Partition:
    """The partition row, locked for this transaction; UnknownTopicOrPartitionError if there is none."""
    try:
        return _partitions(lease).select_for_update().get(topic__name=topic, index=index)
    except Partition.DoesNotExist:
        raise errors.UnknownTopicOrPartitionError(f"{topic}-{index} does not exist") from None


def _alive_ids(lease: Lease) -> set[int]:
    return set(Broker.objects.filter(cluster_id=lease.cluster_id, state=BrokerState.ALIVE).values_list("broker_id", flat=True))


def _set_leader(partition: Partition, leader: int, isr: list[int]) -> None:
    partition.leader = leader
    partition.isr = list(isr)
    partition.leader_epoch += 1
    partition.partition_epoch += 1
    partition.save(update_fields=["leader", "isr", "leader_epoch", "partition_epoch"])


def _state(partition: Partition) -> m.PartitionState:
    return m.PartitionState(
        topic=partition.topic.name,
        partition=partition.index,
        leader=partition.leader,
        leader_epoch=partition.leader_epoch,
        partition_epoch=partition.partition_epoch,
        replicas=list(partition.replicas),
        isr=list(partition.isr),
    )
