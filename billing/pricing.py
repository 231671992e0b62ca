"""Prices and invoices: usage rollups priced with the plan's fee and a versioned price book, invoices as a ledger.

* The price book in effect on the first day of a period prices it (``PriceBook``); its items give, per
  metric, the unit (GiB = 2^30 bytes, GiB-month of storage, partition-hours, millions of requests), the free
  allowance per plan and tiers (cents per unit up to a number of billable units, then the next tier).
* ``refresh_invoice`` recomputes a draft from the rollups: the plan's fee, one line per priced metric, and a
  correction line for every earlier final invoice whose period's usage has changed since (usage reported
  late): the difference between the price of the usage now and the price already invoiced for that period.
* ``finalise_invoice`` makes it final; a final invoice is never changed again.
Amounts are whole cents, rounded once per line (half up).
"""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import ROUND_HALF_UP, Decimal

from django.db import transaction

GIB = 1 << 30
MONTH_S = 30 * 24 * 3600

# Version 1 of the price book (a migration seeds it; a new version is a new row, effective from its date).
FIRST_PRICE_BOOK = {
    "bytes_in": {"unit": "GiB", "divisor": GIB, "free": {"free": 1, "team": 50, "business": 1000}, "tiers": [[None, 9]]},
    "bytes_out": {"unit": "GiB", "divisor": GIB, "free": {"free": 2, "team": 100, "business": 2000}, "tiers": [[None, 5]]},
    "storage_byte_seconds": {"unit": "GiB-month", "divisor": GIB * MONTH_S, "free": {"free": 1, "team": 100, "business": 2000},
                             "tiers": [[None, 10]]},
    "partition_seconds": {"unit": "partition-hour", "divisor": 3600, "free": {"free": 7200, "team": 144000, "business": 1440000},
                          "tiers": [[None, 0.1]]},
    "requests": {"unit": "million requests", "divisor": 1_000_000, "free": {"free": 1, "team": 50, "business": 500},
                 "tiers": [[100, 40], [None, 20]]},
    "gateway_requests": {"unit": "million requests", "divisor": 1_000_000, "free": {"free": 1, "team": 50, "business": 500},
                         "tiers": [[100, 40], [None, 20]]},
}


def cents(quantity: int, item: dict, plan: str) -> tuple[Decimal, Decimal]:
    """(units, amount in cents, unrounded) of ``quantity`` raw units of a metric under a price book item."""
    units = Decimal(quantity) / Decimal(item["divisor"])
    billable = max(Decimal(0), units - Decimal(str(item.get("free", {}).get(plan, 0))))
    amount, floor = Decimal(0), Decimal(0)
    for up_to, price in item["tiers"]:
        ceiling = billable if up_to is None else min(billable, Decimal(str(up_to)))
        if ceiling > floor:
            amount += (ceiling - floor) * Decimal(str(price))
            floor = ceiling
        if up_to is None or billable <= Decimal(str(up_to)):
            break
    return units, amount


def _whole(amount: Decimal) -> int:
    return int(amount.quantize(Decimal(1), rounding=ROUND_HALF_UP))


def book_for(period: str):
    from tideway_server.billing.models import PriceBook

    year, month = (int(x) for x in period.split("-"))
    book = PriceBook.objects.filter(effective_from__lte=date(year, month, 1)).order_by("-effective_from", "-version").first()
    if book is None:
        raise LookupError(f"no price book is in effect for {period}")
    return book


def period_usage(tenant, period: str) -> dict[str, int]:
    """The tenant's usage in ``period`` per metric (the job's daily rollups, every queue)."""
    from tideway_server.billing.models import UsageRollup

    out: dict[str, int] = {}
    for metric, value in UsageRollup.objects.filter(tenant=tenant, period=period, granularity="day").values_list("metric", "value"):
        out[metric] = out.get(metric, 0) + value
    return out


def usage_lines(tenant, period: str, book) -> list[dict]:
    lines = []
    used = period_usage(tenant, period)
    for metric, item in sorted(book.prices.items()):
        quantity = used.get(metric, 0)
        if not quantity:
            continue
        units, amount = cents(quantity, item, tenant.plan.name)
        lines.append({"kind": "usage", "metric": metric, "usage_period": period, "quantity": quantity,
                      "units": units.quantize(Decimal("0.000001")), "unit": item["unit"], "amount_cents": _whole(amount),
                      "description": f"{metric.replace('_', ' ')}: {units:.6f} {item['unit']}"})
    return lines


def _corrections(tenant, period: str, invoice) -> list[dict]:
    """For every final invoice of an earlier period: what its period's usage costs now minus what was charged."""
    from tideway_server.billing.models import Invoice, InvoiceLine

    out = []
    for earlier in Invoice.objects.filter(tenant=tenant, status=Invoice.FINAL, period__lt=period).order_by("period"):
        book = book_for(earlier.period)
        now = {line["metric"]: line for line in usage_lines(tenant, earlier.period, book)}
        charged: dict[str, tuple[int, int]] = {}
        for line in InvoiceLine.objects.filter(invoice__tenant=tenant, usage_period=earlier.period,
                                               kind__in=[InvoiceLine.USAGE, InvoiceLine.CORRECTION]).exclude(invoice=invoice):
            quantity, amount = charged.get(line.metric, (0, 0))
            charged[line.metric] = (quantity + line.quantity, amount + line.amount_cents)
        for metric in sorted(set(now) | set(charged)):
            quantity_now = now[metric]["quantity"] if metric in now else 0
            amount_now = now[metric]["amount_cents"] if metric in now else 0
            quantity_then, amount_then = charged.get(metric, (0, 0))
            if quantity_now == quantity_then:
                continue
            item = book.prices.get(metric, {"unit": "", "divisor": 1})
            out.append({"kind": "correction", "metric": metric, "usage_period": earlier.period,
                        "quantity": quantity_now - quantity_then,
                        "units": (Decimal(quantity_now - quantity_then) / Decimal(item["divisor"])).quantize(Decimal("0.000001")),
                        "unit": item["unit"], "amount_cents": amount_now - amount_then,
                        "description": f"correction for {earlier.period}: {metric.replace('_', ' ')} reported late"})
    return out


def refresh_invoice(tenant, period: str):
    """The tenant's invoice for ``period``, recomputed unless it is final (then returned as it is)."""
    from tideway_server.billing.models import Invoice, InvoiceLine

    book = book_for(period)
    with transaction.atomic():
        invoice, _created = Invoice.objects.select_for_update().get_or_create(
            tenant=tenant, period=period, defaults={"price_book_version": book.version, "currency": book.currency})
        if invoice.status == Invoice.FINAL:
            return invoice
        lines = [{"kind": "plan", "metric": "", "usage_period": period, "quantity": 1, "units": Decimal(1), "unit": "month",
                  "amount_cents": tenant.plan.monthly_price_cents, "description": f"{tenant.plan.display_name} plan"}]
        lines += usage_lines(tenant, period, book) + _corrections(tenant, period, invoice)
        invoice.lines.all().delete()
        InvoiceLine.objects.bulk_create([InvoiceLine(invoice=invoice, **line) for line in lines])
        invoice.total_cents = sum(line["amount_cents"] for line in lines)
        invoice.price_book_version, invoice.currency = book.version, book.currency
        invoice.save()
    return invoice


def finalise_invoice(tenant, period: str):
    from tideway_server.billing.models import Invoice

    invoice = refresh_invoice(tenant, period)
    if invoice.status != Invoice.FINAL:
        invoice.status, invoice.finalized_at = Invoice.FINAL, datetime.now(UTC)
        invoice.save(update_fields=["status", "finalized_at", "updated"])
    return invoice
