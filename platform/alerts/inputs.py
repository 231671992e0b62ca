"""What alert rules are judged on, read from Redis: the live lag looks and the gateway's throttling counts.

Shared by the evaluation task (alerts.tasks) and the console's rule preview.
"""

from __future__ import annotations

import json
import logging

log = logging.getLogger(__name__)


def live_samples(tenant_ids: list[int]) -> dict[int, dict[str, dict]]:
    """Each tenant's latest look at its groups (lag.store, in Redis): {tenant id: {group key: sample}}."""
    import redis
    from django.conf import settings
    from tideway_server.lag.store import redis_key

    connection = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        pipe = connection.pipeline(transaction=False)
        for tenant_id in tenant_ids:
            pipe.hgetall(redis_key(tenant_id))
        answers = pipe.execute()
    finally:
        connection.close()
    return {tenant_id: {field.decode(): json.loads(value) for field, value in fields.items()}
            for tenant_id, fields in zip(tenant_ids, answers, strict=True)}


def recent_throttling(tenant_ids: list[int]) -> dict[int, float] | None:
    """Times each tenant was throttled in the last minute or two (gateway.limits), or None if Redis did not answer."""
    import redis
    from django.conf import settings
    from tideway_server.gateway.limits import throttled_counts

    if not tenant_ids:
        return {}
    connection = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        counts = throttled_counts(connection, tenant_ids, minutes=2)
    except (redis.RedisError, OSError) as exc:
        log.warning("throttling counts unreadable (%s): throttled rules see no data this round", exc)
        return None
    finally:
        connection.close()
    return {tenant_id: float(sum(spans["last_minute"].values())) for tenant_id, spans in counts.items()}


def oldest_open_transactions(tenant_ids: list[int]) -> dict[int, float | None]:
    """How long each tenant's oldest open transaction has been open, in seconds (0: none open; None: a cluster
    did not answer and nothing open was seen), asked of each cluster the tenants' queues live on."""
    import asyncio

    from tideway_server.clusters.admin import broker_credentials
    from tideway_server.gateway.operations.traffic import tenant_bootstraps
    from tideway_server.gateway.operations.transactions import oldest_open_s, tenant_view

    from tideway.native import TidewayClient
    from tideway.native.transactions import list_transactions
    from tideway.protocol import errors

    if not tenant_ids:
        return {}
    bootstraps = {tenant_id: tenant_bootstraps(tenant_id) for tenant_id in tenant_ids}

    async def listed_by(bootstrap: str):
        try:
            async with TidewayClient(bootstrap, credentials=broker_credentials(), request_timeout_ms=5000) as client:
                return await list_transactions(client)
        except (errors.TidewayError, OSError) as exc:
            log.warning("transactions of %s unreadable (%s): their rules see no data this round", bootstrap, exc)
            return f"a cluster did not answer: {exc}"

    async def gather() -> dict[str, list | str]:
        wanted = sorted({b for found in bootstraps.values() for b in found})
        return dict(zip(wanted, await asyncio.gather(*(listed_by(b) for b in wanted)), strict=True))

    listed = asyncio.run(gather())
    return {tenant_id: oldest_open_s(tenant_view(tenant_id, {b: listed[b] for b in found}))
            for tenant_id, found in bootstraps.items()}
