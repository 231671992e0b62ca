"""The control plane's calls to a broker cluster, through the broker client as any program would.

Django views and actions are synchronous; each call here runs the async
client on an event loop of its own (in a worker thread when the caller is
already inside one) and closes its connections afterwards. Management calls
are rare, so a connection per call is simpler than a shared pool.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Awaitable, Callable
from typing import TypeVar

from brokers.client import TidewayClient
from clusters.choices import BrokerState
from clusters.models import Cluster

T = TypeVar("T")
REQUEST_TIMEOUT_MS = 30_000


def bootstrap_of(cluster: Cluster) -> str:
    """Registered live brokers' addresses, else the cluster's configured bootstrap list."""
    brokers = cluster.brokers.filter(state=BrokerState.ALIVE).order_by("broker_id")
    addresses = [f"{b.host}:{b.port}" for b in brokers]
    if not addresses and cluster.bootstrap:
        addresses = [a.strip() for a in cluster.bootstrap.split(",") if a.strip()]
    if not addresses:
        from controlplane.errors import ActionError

        raise ActionError("cluster_unavailable", f"cluster {cluster.name!r} has no live broker", 503)
    return ",".join(addresses)


def _run(bootstrap: str, call: Callable[[TidewayClient], Awaitable[T]]) -> T:
    async def main() -> T:
        client = TidewayClient(bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
        try:
            await client.start()
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
