"""Where lag samples go: the latest look per group in Redis (the console's live view and the alert rules read
it), and every look to the internal topic ``__lag`` (the ``consumer_lag`` Spark job rolls it up).

Redis: a hash per tenant, ``tideway:lag:<tenant id>``, field ``<kind>:<queue>:<group>`` -> the group's sample
as JSON; replaced whole by each look (a deleted group disappears), expiring an hour after the last look.

``__lag``: JSON records (zstd-compressed batches: the names repeat) of up to ``GROUPS_PER_RECORD`` groups, ``{"at_ms", "cluster", "groups": [[tenant id,
queue, group, kind, members, in flight, dead letters, [[partition, position, log end, lag, lag ms, in flight,
produce rate, consume rate], ...]], ...]}``, on one partition, kept 7 days, replication factor up to 3.
"""

from __future__ import annotations

import json

from tideway.native import Producer, TidewayClient
from tideway.protocol import errors

LAG_TOPIC = "__lag"
LAG_SETTINGS = {"retention.ms": str(7 * 24 * 3600 * 1000), "segment.bytes": str(64 << 20), "max.message.bytes": str(8 << 20)}
GROUPS_PER_RECORD = 500
REDIS_PREFIX = "tideway:lag:"
REDIS_TTL_S = 3600


def redis_key(tenant_id: int) -> str:
    return f"{REDIS_PREFIX}{tenant_id}"


async def latest(redis, tenant_ids: list[int]) -> dict[tuple[int, str], dict]:
    """The last look at every group of these tenants: {(tenant id, group key): sample}."""
    out = {}
    pipe = redis.pipeline(transaction=False)
    for tenant_id in tenant_ids:
        pipe.hgetall(redis_key(tenant_id))
    for tenant_id, fields in zip(tenant_ids, await pipe.execute(), strict=True):
        for field, value in fields.items():
            out[(tenant_id, field.decode() if isinstance(field, bytes) else field)] = json.loads(value)
    return out


async def save_latest(redis, tenant_ids: list[int], samples: list[dict]) -> None:
    from tideway_server.lag.sampler import group_key

    by_tenant: dict[int, dict[str, str]] = {tenant_id: {} for tenant_id in tenant_ids}
    for sample in samples:
        by_tenant.setdefault(sample["tenant_id"], {})[group_key(sample["queue"], sample["kind"], sample["group"])] = \
            json.dumps(sample, separators=(",", ":"))
    pipe = redis.pipeline(transaction=True)
    for tenant_id, fields in by_tenant.items():
        pipe.delete(redis_key(tenant_id))
        if fields:
            pipe.hset(redis_key(tenant_id), mapping=fields)
            pipe.expire(redis_key(tenant_id), REDIS_TTL_S)
    await pipe.execute()


def lag_records(cluster: str, samples: list[dict], at_ms: int) -> list[bytes]:
    groups = [[s["tenant_id"], s["queue"], s["group"], s["kind"], s["members"], s["in_flight"], s["dead_letters"],
               s["partitions"]] for s in samples]
    return [json.dumps({"at_ms": at_ms, "cluster": cluster, "groups": groups[i:i + GROUPS_PER_RECORD]},
                       separators=(",", ":")).encode()
            for i in range(0, len(groups), GROUPS_PER_RECORD)]


async def publish(client: TidewayClient, cluster: str, samples: list[dict], at_ms: int) -> None:
    """The look, to ``__lag`` (created on first use), acknowledged by every in-sync replica."""
    if not samples:
        return
    records = lag_records(cluster, samples, at_ms)
    for attempt in range(2):
        try:
            async with Producer(client, acks="all", linger_ms=0, compression="zstd") as producer:
                sent = [await producer.send(LAG_TOPIC, record, key=cluster.encode(), partition=0, timestamp_ms=at_ms)
                        for record in records]
                for delivery in sent:
                    await delivery
            return
        except errors.UnknownTopicOrPartitionError:
            if attempt:
                raise
            try:
                await client.create_topic(LAG_TOPIC, partitions=1, replication_factor=min(3, max(1, len(client.brokers))),
                                          configs=LAG_SETTINGS)
            except errors.TopicAlreadyExistsError:
                pass
