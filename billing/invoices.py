"""Invoices as the API, the CLI and the console show them (JSON and CSV)."""

from __future__ import annotations

import csv
import io

CSV_COLUMNS = ["invoice", "tenant", "period", "status", "kind", "metric", "usage_period", "quantity", "units", "unit",
               "amount_cents", "currency", "description"]


def invoice_json(invoice, *, lines: bool = False) -> dict:
    out = {"id": invoice.pk, "period": invoice.period, "status": invoice.status, "currency": invoice.currency,
           "total_cents": invoice.total_cents, "price_book_version": invoice.price_book_version,
           "finalized_at": invoice.finalized_at.isoformat().replace("+00:00", "Z") if invoice.finalized_at else None,
           "updated": invoice.updated.isoformat().replace("+00:00", "Z")}
    if lines:
        out["lines"] = [{"kind": line.kind, "metric": line.metric, "usage_period": line.usage_period,
                         "quantity": line.quantity, "units": str(line.units), "unit": line.unit,
                         "amount_cents": line.amount_cents, "description": line.description}
                        for line in invoice.lines.all()]
    return out


def invoice_csv(invoice) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for line in invoice.lines.all():
        writer.writerow([invoice.pk, invoice.tenant.slug, invoice.period, invoice.status, line.kind, line.metric,
                         line.usage_period, line.quantity, line.units, line.unit, line.amount_cents, invoice.currency,
                         line.description])
    writer.writerow([invoice.pk, invoice.tenant.slug, invoice.period, invoice.status, "total", "", "", "", "", "",
                     invoice.total_cents, invoice.currency, "total"])
    return out.getvalue()
