"""The dashboard: the tenant's queues, quota use and recent audit events."""

from __future__ import annotations

from django.views.decorators.http import require_safe

from webui.access import member_page
from webui.render import page


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
