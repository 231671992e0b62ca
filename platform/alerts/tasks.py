"""Celery's side of alerts, on the ``monitoring`` queue: rules evaluated every ``TIDEWAY_ALERTS_EVALUATE_S`` (10 s)
from the live lag samples in Redis (and, for the rules that ask, the throttling counts and the tenants' open
transactions), and deliveries sent (after each evaluation, and every few seconds for
retries)."""

from __future__ import annotations

import logging

from celery import shared_task

log = logging.getLogger(__name__)


@shared_task(name="alerts.evaluate")
def evaluate() -> dict:
    from django.conf import settings
    from tideway_server.alerts.evaluate import evaluate_all, send_due
    from tideway_server.alerts.inputs import (
        live_samples,
        oldest_open_transactions,
        recent_throttling,
    )
    from tideway_server.alerts.models import AlertRule

    enabled = AlertRule.objects.filter(enabled=True)
    tenant_ids = sorted(set(enabled.values_list("tenant_id", flat=True)))
    throttled_tenants = sorted(set(enabled.filter(metric="throttled").values_list("tenant_id", flat=True)))
    transaction_tenants = sorted(set(enabled.filter(metric="oldest_transaction_seconds").values_list("tenant_id", flat=True)))
    counts = evaluate_all(live_samples(tenant_ids), stale_ms=int(3 * settings.LAG_SAMPLE_SECONDS * 1000) + 5000,
                          throttled=recent_throttling(throttled_tenants),
                          oldest_transactions=oldest_open_transactions(transaction_tenants))
    counts["sent"] = send_due()
    return counts


@shared_task(name="alerts.deliver")
def deliver() -> dict:
    from tideway_server.alerts.evaluate import send_due

    return {"sent": send_due()}
