"""Which broker cluster a tenant's new queue goes to.

A tenant with a dedicated cluster always uses it. Otherwise: the shared
(non-dedicated) clusters of the tenant's region, the one with the most free
partition capacity (max_partitions minus partitions placed), provided the
queue fits.
"""

from __future__ import annotations

from django.db.models import Sum
from tideway_server.clusters.models import Cluster
from tideway_server.controlplane.errors import ActionError


def used_partitions(cluster: Cluster) -> int:
    from tideway_server.topics.models import Queue

    return Queue.objects.filter(cluster=cluster).aggregate(total=Sum("partitions"))["total"] or 0


def choose_cluster(tenant, partitions: int) -> Cluster:
    if tenant.dedicated_cluster_id is not None:
        cluster = tenant.dedicated_cluster
        if used_partitions(cluster) + partitions > cluster.max_partitions:
            raise ActionError("no_capacity", f"dedicated cluster {cluster.name!r} has no room for {partitions} more partitions")
        return cluster
    best, best_free = None, -1
    for cluster in Cluster.objects.filter(region=tenant.region, dedicated=False).order_by("name"):
        free = cluster.max_partitions - used_partitions(cluster)
        if free >= partitions and free > best_free:
            best, best_free = cluster, free
    if best is None:
        raise ActionError("no_capacity", f"no cluster in region {tenant.region!r} has room for {partitions} partitions")
    return best


def check_cluster(tenant, cluster: Cluster, partitions: int) -> Cluster:
    """``cluster`` when the tenant's new queue may go there (its dedicated cluster, or a shared one of its region,
    with room): a broker's Kafka client creates a queue on the cluster it is connected to."""
    if tenant.dedicated_cluster_id is not None and tenant.dedicated_cluster_id != cluster.pk:
        raise ActionError("no_capacity", f"this tenant's queues live on its dedicated cluster "
                                         f"{tenant.dedicated_cluster.name!r}; connect there")
    if tenant.dedicated_cluster_id is None and (cluster.dedicated or cluster.region != tenant.region):
        raise ActionError("no_capacity", f"cluster {cluster.name!r} does not take this tenant's queues")
    if used_partitions(cluster) + partitions > cluster.max_partitions:
        raise ActionError("no_capacity", f"cluster {cluster.name!r} has no room for {partitions} more partitions")
    return cluster
