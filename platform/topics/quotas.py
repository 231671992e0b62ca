"""Checks of a tenant's plan quotas when queues are created or changed.

Each check raises QuotaExceeded (an ActionError, ``quota_exceeded``) naming the quota, its limit, what was asked
and the queue field it concerns, in words ("the free plan keeps messages up to 7 days"), so the API answers 403
with details and the console shows the sentence beside the field.
"""

from __future__ import annotations

from dataclasses import dataclass

from tideway_server.controlplane.errors import ActionError
from tideway_server.controlplane.units import duration_ms, size
from tideway_server.tenants.models import Plan

# The queue field each quota bounds (the console shows the error beside it); max_queues bounds none.
QUOTA_FIELDS = {"max_partitions": "partitions", "max_storage_bytes": "retention_bytes",
                "max_message_bytes": "max_message_bytes", "max_retention_ms": "retention_ms"}


class QuotaExceeded(ActionError):
    """Raised when an action would take a tenant past one of its plan's quotas."""

    def __init__(self, quota: str, limit: int, requested: int, message: str) -> None:
        details = {"quota": quota, "limit": limit, "requested": requested}
        if quota in QUOTA_FIELDS:
            details["field"] = QUOTA_FIELDS[quota]
        super().__init__("quota_exceeded", message, details=details)
        self.quota, self.limit, self.requested = quota, limit, requested


@dataclass(frozen=True)
class Footprint:
    """What a tenant's queues take from its quotas."""

    queues: int
    partitions: int
    storage_bytes: int


def check_queue_fits(plan: Plan, used: Footprint, *, partitions: int, retention_bytes: int, retention_ms: int,
                     max_message_bytes: int, new_queue: bool) -> None:
    """Raise QuotaExceeded unless a queue with these settings fits beside ``used``.

    ``used`` excludes the queue itself when it is being changed.
    """
    queues = used.queues + 1
    if new_queue and queues > plan.max_queues:
        raise QuotaExceeded("max_queues", plan.max_queues, queues,
                            f"the {plan.name} plan allows {plan.max_queues:,} queues, and they all exist "
                            "(quota max_queues)")
    total_partitions = used.partitions + partitions
    if total_partitions > plan.max_partitions:
        raise QuotaExceeded("max_partitions", plan.max_partitions, total_partitions,
                            f"the {plan.name} plan allows {plan.max_partitions:,} partitions in all, and this would "
                            f"make {total_partitions:,}: at most {max(plan.max_partitions - used.partitions, 0):,} "
                            "here (quota max_partitions)")
    storage = used.storage_bytes + retention_bytes * partitions
    if storage > plan.max_storage_bytes:
        raise QuotaExceeded("max_storage_bytes", plan.max_storage_bytes, storage,
                            f"the {plan.name} plan keeps {size(plan.max_storage_bytes)} of messages in all, and this "
                            f"would reserve {size(storage)} (retention bytes per partition times partitions, summed "
                            "over the queues): keep fewer bytes per partition (quota max_storage_bytes)")
    if max_message_bytes > plan.max_message_bytes:
        raise QuotaExceeded("max_message_bytes", plan.max_message_bytes, max_message_bytes,
                            f"the {plan.name} plan allows messages up to {size(plan.max_message_bytes)}; "
                            f"{size(max_message_bytes)} was asked (quota max_message_bytes)")
    if retention_ms < 0 or retention_ms > plan.max_retention_ms:
        asked = "forever" if retention_ms < 0 else duration_ms(retention_ms)
        raise QuotaExceeded("max_retention_ms", plan.max_retention_ms, retention_ms,
                            f"the {plan.name} plan keeps messages up to {duration_ms(plan.max_retention_ms)}; "
                            f"{asked} was asked (quota max_retention_ms)")
