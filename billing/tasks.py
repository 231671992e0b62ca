"""Celery beat keeps usage and invoices current: the open month every few minutes, last month closed once a day.

Both run the ``usage_billing`` Spark job (local mode by default: TIDEWAY_SPARK_MASTER for a cluster) on the
``billing`` queue, which `tideway up` serves with a worker of its own, so redrives never wait behind a job.
"""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta

from celery import shared_task

log = logging.getLogger(__name__)


def _master() -> str:
    return os.environ.get("TIDEWAY_SPARK_MASTER", "local[2]")


def _tenants():
    from tideway_server.tenants.models import Tenant

    return Tenant.objects.select_related("plan")


@shared_task(name="billing.refresh_current_period")
def refresh_current_period() -> dict:
    """Roll up this month's usage so far and recompute every tenant's draft invoice."""
    from tideway_server.billing.pricing import refresh_invoice
    from tideway_server.billing.usage_job import run_usage_billing

    period = datetime.now(UTC).strftime("%Y-%m")
    summary = run_usage_billing(period, master=_master(), progress=log.info)
    for tenant in _tenants():
        refresh_invoice(tenant, period)
    return summary


@shared_task(name="billing.close_last_month")
def close_last_month() -> dict:
    """Roll up last month once more and finalise its invoices (usage reported later becomes corrections)."""
    from tideway_server.billing.models import Invoice
    from tideway_server.billing.pricing import finalise_invoice
    from tideway_server.billing.usage_job import run_usage_billing

    period = (datetime.now(UTC).replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    summary = run_usage_billing(period, master=_master(), progress=log.info)
    finalised = 0
    for tenant in _tenants():
        if not Invoice.objects.filter(tenant=tenant, period=period, status=Invoice.FINAL).exists():
            finalise_invoice(tenant, period)
            finalised += 1
    return {**summary, "finalised": finalised}
