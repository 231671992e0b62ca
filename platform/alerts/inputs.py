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
