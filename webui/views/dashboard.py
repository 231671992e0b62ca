"""The dashboard: the tenant's queues, traffic over the last hour, the groups furthest behind, dead letters,
quota use, how often the plan's rate limits held the tenant back, and recent audit events (the parts that ask the brokers load separately, so the page never waits)."""

from __future__ import annotations

from django.views.decorators.http import require_safe
from tideway_server.webui.access import member_page
from tideway_server.webui.render import page

BEHIND_QUEUES_MAX = 25  # queues looked at for "furthest behind" (each asks the brokers about its groups)
BEHIND_SHOWN = 10
DEAD_LETTER_QUEUES_MAX = 100  # queue-mode queues looked at for dead letters (most recently changed first)


@require_safe
@member_page()
def dashboard(request):
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.actions import quota_use

    tenant = request.principal.tenant
    plan = tenant.plan
    bars = quota_use(tenant)
    events = AuditEntry.objects.filter(tenant=tenant).order_by("-created")[:10]
    return page(request, "dashboard.html", {"tenant": tenant, "plan": plan, "bars": bars, "events": events,
                                            "queue_count": bars[0]["used"], **_onboarding(request, tenant)})


def _onboarding(request, tenant) -> dict:
    """The "Get started" panel: the first queue and key (done or a link) and snippets to send a first message with
    curl, Python, a browser and a Kafka client, for the tenant's first queue at this site's address."""
    from tideway_server.clusters.models import Broker
    from tideway_server.tenants.models import ApiKey
    from tideway_server.topics.models import Queue

    first_queue = Queue.objects.filter(tenant=tenant).select_related("cluster").order_by("created").first()
    base = request.build_absolute_uri("/").rstrip("/")
    brokers = Broker.objects.filter(cluster=first_queue.cluster, kafka_port__gt=0).order_by("broker_id") if first_queue \
        else Broker.objects.none()
    return {"first_queue": first_queue, "queue_name": first_queue.name if first_queue else "orders",
            "has_key": ApiKey.objects.filter(tenant=tenant, revoked_at__isnull=True).exists(), "base": base,
            "ws_base": base.replace("http", "ws", 1),
            "kafka_bootstrap": ",".join(f"{b.kafka_host or b.host}:{b.kafka_port}" for b in brokers[:3])}


@require_safe
@member_page(scope="consume")
def behind(request):
    """The groups furthest behind, in seconds, over the tenant's most recently changed queues (HTMX loads it)."""
    from tideway_server.topics.models import Queue
    from tideway_server.webui import data
    from tideway_server.webui.groups import groups_of

    rows, error = [], ""
    names = Queue.objects.filter(tenant=request.principal.tenant, status="ready").order_by("-updated") \
        .values_list("name", flat=True)[:BEHIND_QUEUES_MAX]
    unread = []
    for name in names:
        try:
            info = data.queue_info(request.principal, name)
            top = groups_of(info, data.run, per_page=BEHIND_SHOWN).groups  # this queue's furthest behind, in messages
        except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so, show the others
            unread.append(f"{name} ({exc})")
            continue
        rows += [{**group, "queue": name} for group in top if group["lag"]]
    if unread:
        error = f"the brokers did not answer for {len(unread)} queue(s): " + "; ".join(unread[:3])
    rows.sort(key=lambda g: (-g["lag_seconds"], -g["lag"]))
    return page(request, "dashboard.html", {"behind": rows[:BEHIND_SHOWN], "behind_error": error,
                                            "looked_at": len(names)}, partial="behind.html")


@require_safe
@member_page()
def traffic(request):
    """The tenant's messages and bytes in and out, minute by minute over the last hour (JSON for the chart)."""
    from django.http import JsonResponse
    from tideway_server.gateway.operations.traffic import tenant_bootstraps, tenant_last_hour
    from tideway_server.webui import data

    tenant = request.principal.tenant
    return JsonResponse(data.run(tenant_last_hour, tenant.pk, tenant_bootstraps(tenant.pk)))


@require_safe
@member_page(scope="consume")
def dead_letter_totals(request):
    """Dead letters waiting, per queue and in all, over the tenant's most recently changed queue-mode queues."""
    from tideway_server.gateway import operations
    from tideway_server.topics.models import Queue
    from tideway_server.webui import data

    rows, error = [], ""
    names = Queue.objects.filter(tenant=request.principal.tenant, status="ready", mode="queue").order_by("-updated") \
        .values_list("name", flat=True)[:DEAD_LETTER_QUEUES_MAX]
    caller = data.caller_for(request.principal)
    try:
        for name in names:
            count, exact = data.run(operations.dead_letter_count, caller, data.queue_info(request.principal, name))
            if count:
                rows.append({"queue": name, "count": count, "exact": exact})
    except Exception as exc:  # noqa: BLE001 - the brokers did not answer: say so on the page
        error = f"the brokers did not answer: {exc}"
    rows.sort(key=lambda row: -row["count"])
    return page(request, "dashboard.html", {"dead_letters": rows, "dead_letter_total": sum(r["count"] for r in rows),
                                            "dead_letter_error": error, "looked_at": len(names),
                                            "all_exact": all(r["exact"] for r in rows)},
                partial="dead_letter_totals.html")


@require_safe
@member_page()
def throttling(request):
    """The plan's rate limits and how often each held the tenant back: the last minute, hour and day (from Redis)."""
    from tideway_server.gateway.errors import GatewayError
    from tideway_server.gateway.operations.traffic import tenant_throttling

    plan = request.principal.tenant.plan
    error, counts = "", None
    try:
        counts = tenant_throttling(request.principal.tenant.pk)
    except GatewayError as exc:
        error = exc.message
    rates = {"requests": f"{plan.max_requests_per_s:,} requests/s",
             "publish_bytes": f"{plan.max_publish_bytes_per_s / (1 << 20):,.0f} MiB/s published",
             "consume_bytes": f"{plan.max_consume_bytes_per_s / (1 << 20):,.0f} MiB/s consumed"}
    spans = ("last_minute", "last_hour", "last_day")
    rows = [{"limit": limit, "rate": rate, **{span: counts[span][limit] if counts else None for span in spans}}
            for limit, rate in rates.items()]
    return page(request, "dashboard.html", {"throttling": rows, "throttling_error": error}, partial="throttling.html")
