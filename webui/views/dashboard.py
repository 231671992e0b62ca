"""The dashboard: the tenant's queues, quota use and recent audit events."""

from __future__ import annotations

from django.views.decorators.http import require_safe

from webui.access import member_page
from webui.render import page

BEHIND_QUEUES_MAX = 25  # queues looked at for "furthest behind" (each asks the brokers about its groups)
BEHIND_SHOWN = 10


@require_safe
@member_page()
def dashboard(request):
    from tenants.models import AuditEntry
    from topics.actions import footprint

    tenant = request.principal.tenant
    plan = tenant.plan
    used = footprint(tenant)
    quotas = [
        ("queues", used.queues, plan.max_queues),
        ("partitions", used.partitions, plan.max_partitions),
        ("reserved storage (bytes)", used.storage_bytes, plan.max_storage_bytes),
    ]
    bars = [{"name": name, "used": value, "limit": limit, "percent": min(100, round(100 * value / limit)) if limit else 0}
            for name, value, limit in quotas]
    events = AuditEntry.objects.filter(tenant=tenant).order_by("-created")[:10]
    return page(request, "dashboard.html", {"tenant": tenant, "plan": plan, "bars": bars, "events": events,
                                            "queue_count": used.queues})


@require_safe
@member_page(scope="consume")
def behind(request):
    """The groups furthest behind, in seconds, over the tenant's most recently changed queues (HTMX loads it)."""
    from topics.models import Queue
    from webui import data
    from webui.groups import groups_of

    rows, error = [], ""
    names = Queue.objects.filter(tenant=request.principal.tenant, status="ready").order_by("-updated") \
        .values_list("name", flat=True)[:BEHIND_QUEUES_MAX]
    try:
        for name in names:
            info = data.queue_info(request.principal, name)
            rows += [{**group, "queue": name} for group in groups_of(info, data.run) if group["lag"]]
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        error = f"the brokers did not answer: {exc}"
    rows.sort(key=lambda g: (-g["lag_seconds"], -g["lag"]))
    return page(request, "dashboard.html", {"behind": rows[:BEHIND_SHOWN], "behind_error": error,
                                            "looked_at": len(names)}, partial="behind.html")
