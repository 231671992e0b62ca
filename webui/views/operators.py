"""Operators' pages (staff users): clusters and their brokers, tenants with their use, plans."""

from __future__ import annotations

from functools import wraps

from django.db.models import Count, F, Q, Sum
from django.shortcuts import redirect
from django.views.decorators.http import require_safe
from tideway_server.webui.access import console_principal
from tideway_server.webui.render import confirmation, confirmed, forbidden, page


def operator_page(view):
    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated:
            return redirect(f"/console/signin?next={request.path}")
        if not request.user.is_staff:
            return forbidden(request, "These pages are for the platform's operators.")
        request.principal = console_principal(request)
        return view(request, *args, **kwargs)

    return wrapped


@require_safe
@operator_page
def clusters(request):
    from tideway_server.clusters.models import Broker, Cluster, Partition

    rows = []
    for cluster in Cluster.objects.order_by("name"):
        partitions = Partition.objects.filter(topic__cluster=cluster)
        counts = partitions.aggregate(total=Count("id"), offline=Count("id", filter=Q(leader=-1)))
        under = sum(1 for isr, replicas in partitions.values_list("isr", "replicas") if len(isr) < len(replicas))
        rows.append({"cluster": cluster, "brokers": Broker.objects.filter(cluster=cluster).order_by("broker_id"),
                     "partitions": counts["total"], "offline": counts["offline"], "under_replicated": under})
    return page(request, "operator_clusters.html", {"clusters": rows})


@require_safe
@operator_page
def tenants(request):
    from tideway_server.tenants.models import Tenant

    rows = (Tenant.objects.select_related("plan").order_by("slug")
            .annotate(queue_count=Count("queues", distinct=True), partition_total=Sum("queues__partitions"),
                      member_count=Count("memberships", distinct=True),
                      storage=Sum(F("queues__partitions") * F("queues__retention_bytes"))))
    return page(request, "operator_tenants.html", {"tenants": rows})


@operator_page
def suspend(request, slug: str):
    """Suspend or resume a tenant (POST ``suspended`` = 1 or 0)."""
    from django.http import Http404
    from tideway_server.tenants.actions import do_suspend_tenant
    from tideway_server.tenants.models import Tenant

    tenant = Tenant.objects.filter(slug=slug).first()
    if tenant is None:
        raise Http404(f"tenant {slug!r} does not exist")
    suspending = request.method == "GET" or request.POST.get("suspended") == "1"
    if suspending and not confirmed(request, tenant.slug):  # resuming gives back, takes nothing: one click
        return confirmation(
            request, title=f"Suspend the tenant {tenant.slug}",
            consequence=f"{tenant.name}'s API keys are refused by the API, the gateway and the brokers within a few "
                        "seconds (producers and consumers stop), and its members cannot sign in to the console. "
                        "Its queues, messages and settings are kept.",
            undo="Resume it on the tenants page to undo this: its keys and members work again.",
            word=tenant.slug, word_label="the tenant's slug", button="Suspend", cancel="/console/operator/tenants",
            hidden=(("suspended", "1"),),
            error="" if request.method != "POST" else f"type the tenant's slug ({tenant.slug}) to suspend it")
    do_suspend_tenant(tenant, suspending, acting=f"operator:{request.user.username}")
    return redirect("/console/operator/tenants")


@require_safe
@operator_page
def plans(request):
    from tideway_server.tenants.models import Plan

    return page(request, "operator_plans.html", {"plans": Plan.objects.order_by("monthly_price_cents")})
