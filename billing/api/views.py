"""Usage over the REST API: what the tenant used, by hour or day, by metric or queue."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView
from tideway_server.billing.invoices import invoice_csv, invoice_json
from tideway_server.billing.usage import usage
from tideway_server.controlplane.api.errors import not_found


class UsageView(APIView):
    """The caller's tenant's metered usage (messages and bytes in and out, requests, storage), from the latest
    run of the usage_billing job (``computed_at``)."""

    @extend_schema(
        parameters=[
            OpenApiParameter("from", str, description="start, ISO 8601 (default: the start of this month, UTC)"),
            OpenApiParameter("to", str, description="end, exclusive (default: now)"),
            OpenApiParameter("granularity", str, enum=["hour", "day"], description="default: day"),
            OpenApiParameter("group_by", str, enum=["metric", "queue"], description="default: metric"),
        ],
        responses={200: dict}, tags=["usage"],
    )
    def get(self, request):
        params = request.query_params
        return Response(usage(request.auth.tenant, start=params.get("from"), end=params.get("to"),
                              granularity=params.get("granularity", "day"), group_by=params.get("group_by", "metric")))


def _csv(invoice):
    from django.http import HttpResponse

    answer = HttpResponse(invoice_csv(invoice), content_type="text/csv")
    answer["Content-Disposition"] = f'attachment; filename="invoice-{invoice.tenant.slug}-{invoice.period}.csv"'
    return answer


class InvoiceListView(APIView):
    """The tenant's invoices, newest period first: a draft for the open month, final ones before it."""

    @extend_schema(responses={200: dict}, tags=["invoices"])
    def get(self, request):
        from tideway_server.billing.models import Invoice

        rows = Invoice.objects.filter(tenant=request.auth.tenant).order_by("-period")
        return Response([invoice_json(invoice) for invoice in rows])


def _invoice(request, invoice_id: int):
    from tideway_server.billing.models import Invoice

    invoice = Invoice.objects.filter(tenant=request.auth.tenant, pk=invoice_id).select_related("tenant").first()
    if invoice is None:
        raise not_found(f"invoice {invoice_id}", code="invoice_not_found")
    return invoice


class InvoiceDetailView(APIView):
    """One invoice with its lines (plan fee, usage per metric, corrections for earlier periods)."""

    @extend_schema(responses={200: dict}, tags=["invoices"])
    def get(self, request, invoice_id: int):
        return Response(invoice_json(_invoice(request, invoice_id), lines=True))


class InvoiceCsvView(APIView):
    """One invoice as CSV: a row per line, then the total."""

    @extend_schema(responses={(200, "text/csv"): str}, tags=["invoices"])
    def get(self, request, invoice_id: int):
        return _csv(_invoice(request, invoice_id))


class OperatorInvoiceListView(APIView):
    """Operators: every tenant's invoices for a period (``?period=2026-11``, default the current month), with the
    revenue total."""

    operator_only = True

    @extend_schema(parameters=[OpenApiParameter("period", str)], responses={200: dict}, tags=["operators"])
    def get(self, request):
        from datetime import UTC, datetime

        from tideway_server.billing.models import Invoice

        period = request.query_params.get("period") or datetime.now(UTC).strftime("%Y-%m")
        rows = Invoice.objects.filter(period=period).select_related("tenant").order_by("tenant__slug")
        invoices = [{**invoice_json(invoice), "tenant": invoice.tenant.slug} for invoice in rows]
        return Response({"period": period, "invoices": invoices, "total_cents": sum(i["total_cents"] for i in invoices)})
