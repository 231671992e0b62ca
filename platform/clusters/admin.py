"""The control plane's calls to a broker cluster, through the broker client as any program would.

Django views and actions are synchronous; each call here runs the async
client on an event loop of its own (in a worker thread when the caller is
already inside one) and closes its connections afterwards. Management calls
are rare, so a connection per call is simpler than a shared pool.

Every client authenticates with the control plane's service key
(``broker_credentials``), as the gateway and Celery tasks do.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

from tideway_server.clusters.choices import BrokerState
from tideway_server.clusters.models import Cluster

from tideway.native import TidewayClient
from tideway.native.credentials import ApiKey

T = TypeVar("T")
REQUEST_TIMEOUT_MS = 30_000


def bootstrap_of(cluster: Cluster) -> str:
    """Registered live brokers' addresses; else every registered broker's; else the cluster's configured
    bootstrap list.

    "Live" is the controller's view. When it sees no broker (it is cut off from them all, or away), the brokers
    may well be serving clients still (they do without the controller: docs/faults.md), so a client is given
    every broker the cluster has had rather than nothing.
    """
    brokers = cluster.brokers.filter(state=BrokerState.ALIVE).order_by("broker_id")
    addresses = [f"{b.host}:{b.port}" for b in brokers]
    if not addresses:
        addresses = [f"{b.host}:{b.port}" for b in cluster.brokers.order_by("broker_id")]
    if not addresses and cluster.bootstrap:
        addresses = [a.strip() for a in cluster.bootstrap.split(",") if a.strip()]
    if not addresses:
        from tideway_server.controlplane.errors import ActionError

        raise ActionError("cluster_unavailable", f"cluster {cluster.name!r} has no live broker")
    return ",".join(addresses)


def broker_credentials() -> ApiKey:
    """The service key of the control plane: TIDEWAY_SERVICE_KEY, else derived from the deployment's cluster secret."""
    from django.conf import settings
    from tideway_server.brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        ClusterSecretError,
        load_cluster_secret,
        service_key,
    )

    if settings.TIDEWAY_SERVICE_KEY:
        return ApiKey(settings.TIDEWAY_SERVICE_KEY)
    try:
        secret = load_cluster_secret(settings.TIDEWAY_HOME / CLUSTER_SECRET_FILE)
    except ClusterSecretError as exc:
        from tideway_server.controlplane.errors import ActionError

        raise ActionError("cluster_unavailable", f"the control plane has no credentials for the brokers: {exc}") from None
    return ApiKey(service_key(secret, "control-plane"))


def _run(bootstrap: str, call: Callable[[TidewayClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = TidewayClient(bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS, credentials=broker_credentials())
        try:
            await client.refresh_metadata([])  # the brokers only: every topic's metadata grows with the cluster
            return await call(client)
        finally:
            await client.close()

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(main())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:  # called from async code: use a loop of our own
        return pool.submit(asyncio.run, main()).result()


def create_topic(cluster: Cluster, name: str, *, partitions: int, replication_factor: int, configs: dict[str, str]) -> None:
    _run(bootstrap_of(cluster), lambda c: c.create_topic(name, partitions=partitions, replication_factor=replication_factor, configs=configs))


def create_partitions(cluster: Cluster, name: str, count: int) -> None:
    _run(bootstrap_of(cluster), lambda c: c.create_partitions(name, count))


def alter_configs(cluster: Cluster, name: str, *, set: dict[str, str], delete: list[str]) -> dict[str, str]:
    return _run(bootstrap_of(cluster), lambda c: c.alter_configs(name, set=set, delete=delete))


def delete_topic(cluster: Cluster, name: str) -> None:
    _run(bootstrap_of(cluster), lambda c: c.delete_topic(name))


def partition_states(cluster: Cluster, name: str) -> dict[int, dict]:
    """Per partition of topic ``name``, as its leader sees it: first offset, high watermark, log end, bytes on disk
    and segments (DESCRIBE_TOPICS asked of every broker; each answers for its own replicas)."""
    from tideway.protocol import messages as m
    from tideway.protocol.messages import ApiKey as Api

    async def states(client: TidewayClient) -> dict[int, dict]:
        await client.refresh_metadata()
        out: dict[int, dict] = {}
        for node_id in list(client.brokers):
            connection = await client.connection(node_id)
            response = await connection.request(Api.DESCRIBE_TOPICS, m.DescribeTopicsRequest(names=[name]))
            for topic in response.topics:
                for p in topic.partitions:
                    if p.leader == node_id:
                        out[p.partition] = {"first": p.log_start_offset, "high_watermark": p.high_watermark,
                                            "log_end": p.log_end_offset, "size_bytes": p.size_bytes, "segments": p.segments}
        return out

    return _run(bootstrap_of(cluster), states)
