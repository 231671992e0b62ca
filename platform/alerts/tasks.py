"""Celery's side of alerts, on the ``monitoring`` queue: rules evaluated every ``TIDEWAY_ALERTS_EVALUATE_S`` (10 s)
from the live lag samples in Redis, and deliveries sent (after each evaluation, and every few seconds for
retries)."""

from __future__ import annotations

import json
import logging

from celery import shared_task

log = logging.getLogger(__name__)


def _live(tenant_ids: list[int]) -> dict[int, dict[str, dict]]:
    import redis
    from django.conf import settings

    from lag.store import redis_key

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


def _throttled(tenant_ids: list[int]) -> dict[int, float] | None:
    """Times each tenant was throttled in the last minute or two (gateway.limits), or None if Redis did not answer."""
    import redis
    from django.conf import settings

    from gateway.limits import throttled_counts

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


@shared_task(name="alerts.evaluate")
def evaluate() -> dict:
    from django.conf import settings

    from alerts.evaluate import evaluate_all, send_due
    from alerts.models import AlertRule

    enabled = AlertRule.objects.filter(enabled=True)
    tenant_ids = sorted(set(enabled.values_list("tenant_id", flat=True)))
    throttled_tenants = sorted(set(enabled.filter(metric="throttled").values_list("tenant_id", flat=True)))
    counts = evaluate_all(_live(tenant_ids), stale_ms=int(3 * settings.LAG_SAMPLE_SECONDS * 1000) + 5000,
                          throttled=_throttled(throttled_tenants))
    counts["sent"] = send_due()
    return counts


@shared_task(name="alerts.deliver")
def deliver() -> dict:
    from alerts.evaluate import send_due

    return {"sent": send_due()}
