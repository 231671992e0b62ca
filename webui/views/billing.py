"""Usage (charts per metric, a table per queue, quota use) and invoices (list, detail, CSV) of the member's tenant;
for operators, revenue across tenants. The same functions as the API (billing.usage, billing.invoices)."""

from __future__ import annotations

from datetime import UTC, datetime

from django.http import Http404, HttpResponse
from django.views.decorators.http import require_safe
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import member_page
from tideway_server.webui.render import page
from tideway_server.webui.views.operators import operator_page


@require_safe
@member_page()
def usage(request):
    from tideway_server.billing.usage import usage as tenant_usage
    from tideway_server.topics.actions import quota_use

    tenant = request.principal.tenant
    get = request.GET
    granularity = get.get("granularity", "day")
    error = ""
    try:
        by_metric = tenant_usage(tenant, start=get.get("from") or None, end=get.get("to") or None, granularity=granularity)
        by_queue = tenant_usage(tenant, start=get.get("from") or None, end=get.get("to") or None, granularity=granularity,
                                group_by="queue")
    except ActionError as exc:
        error = exc.message
        by_metric = tenant_usage(tenant, start=None, end=None)
        by_queue = tenant_usage(tenant, start=None, end=None, group_by="queue")
    queues: dict[str, dict[str, int]] = {}
    for point in by_queue["series"]:
        row = queues.setdefault(point["queue"] or "(requests)", {})
        row[point["metric"]] = row.get(point["metric"], 0) + point["value"]
    return page(request, "usage.html", {"usage": by_metric, "queues": sorted(queues.items()), "quotas": quota_use(tenant),
                                        "error": error, "granularity": granularity})


def _invoice(request, invoice_id: int):
    from tideway_server.billing.models import Invoice

    invoice = Invoice.objects.filter(tenant=request.principal.tenant, pk=invoice_id).select_related("tenant").first()
    if invoice is None:
        raise Http404("no such invoice")
    return invoice


@require_safe
@member_page()
def invoices(request):
    from tideway_server.billing.models import Invoice

    rows = Invoice.objects.filter(tenant=request.principal.tenant).order_by("-period")
    return page(request, "invoices.html", {"invoices": rows})


@require_safe
@member_page()
def invoice(request, invoice_id: int):
    return page(request, "invoice.html", {"invoice": _invoice(request, invoice_id)})


@require_safe
@member_page()
def invoice_csv(request, invoice_id: int):
    from tideway_server.billing.invoices import invoice_csv as as_csv

    found = _invoice(request, invoice_id)
    answer = HttpResponse(as_csv(found), content_type="text/csv")
    answer["Content-Disposition"] = f'attachment; filename="invoice-{found.tenant.slug}-{found.period}.csv"'
    return answer


@require_safe
@operator_page
def revenue(request):
    from tideway_server.billing.models import Invoice

    period = request.GET.get("period") or datetime.now(UTC).strftime("%Y-%m")
    rows = Invoice.objects.filter(period=period).select_related("tenant", "tenant__plan").order_by("-total_cents")
    return page(request, "revenue.html", {"period": period, "invoices": rows,
                                          "total_cents": sum(i.total_cents for i in rows)})
