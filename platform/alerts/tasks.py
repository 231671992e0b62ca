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


@shared_task(name="alerts.evaluate")
def evaluate() -> dict:
    from django.conf import settings

    from alerts.evaluate import evaluate_all, send_due
    from alerts.models import AlertRule

    tenant_ids = sorted(set(AlertRule.objects.filter(enabled=True).values_list("tenant_id", flat=True)))
    counts = evaluate_all(_live(tenant_ids), stale_ms=int(3 * settings.LAG_SAMPLE_SECONDS * 1000) + 5000)
    counts["sent"] = send_due()
    return counts


@shared_task(name="alerts.deliver")
def deliver() -> dict:
    from alerts.evaluate import send_due

    return {"sent": send_due()}
