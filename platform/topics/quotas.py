"""Checks of a tenant's plan quotas when queues are created or changed.

Each check raises QuotaExceeded naming the quota, its limit and what was
asked, so the API answers with a 4xx that says which quota stopped it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tideway_server.tenants.models import Plan


class QuotaExceeded(Exception):
    """Raised when an action would take a tenant past one of its plan's quotas."""

    def __init__(self, quota: str, limit: int, requested: int, message: str) -> None:
        super().__init__(message)
        self.quota, self.limit, self.requested, self.message = quota, limit, requested, message


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
                            f"quota max_queues exceeded: plan {plan.name!r} allows {plan.max_queues} queues")
    total_partitions = used.partitions + partitions
    if total_partitions > plan.max_partitions:
        raise QuotaExceeded("max_partitions", plan.max_partitions, total_partitions,
                            f"quota max_partitions exceeded: plan {plan.name!r} allows {plan.max_partitions} partitions "
                            f"in all; this would make {total_partitions}")
    storage = used.storage_bytes + retention_bytes * partitions
    if storage > plan.max_storage_bytes:
        raise QuotaExceeded("max_storage_bytes", plan.max_storage_bytes, storage,
                            f"quota max_storage_bytes exceeded: plan {plan.name!r} allows {plan.max_storage_bytes} bytes "
                            f"of retained data; this would reserve {storage} (retention_bytes x partitions, summed)")
    if max_message_bytes > plan.max_message_bytes:
        raise QuotaExceeded("max_message_bytes", plan.max_message_bytes, max_message_bytes,
                            f"quota max_message_bytes exceeded: plan {plan.name!r} allows messages of "
                            f"{plan.max_message_bytes} bytes")
    if retention_ms < 0 or retention_ms > plan.max_retention_ms:
        asked = "retention_ms -1 (keep forever)" if retention_ms < 0 else f"retention_ms {retention_ms}"
        raise QuotaExceeded("max_retention_ms", plan.max_retention_ms, retention_ms,
                            f"quota max_retention_ms exceeded: plan {plan.name!r} keeps messages at most "
                            f"{plan.max_retention_ms} ms; {asked} was asked")
