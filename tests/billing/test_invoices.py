"""Pricing and the invoice ledger: allowances and tiers, drafts and final invoices, late usage as corrections."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest
from tideway_server.billing.pricing import GIB, cents, finalise_invoice, refresh_invoice

from tests.harness.console import signup

pytestmark = pytest.mark.django_db


def test_free_allowance_then_tiers_per_plan():
    item = {"unit": "million requests", "divisor": 1_000_000, "free": {"team": 50}, "tiers": [[100, 40], [None, 20]]}
    assert cents(30_000_000, item, "team") == (Decimal(30), Decimal(0))  # inside the allowance
    assert cents(120_000_000, item, "team")[1] == Decimal(70 * 40)  # 70 billable, all in the first tier
    assert cents(250_000_000, item, "team")[1] == Decimal(100 * 40 + 100 * 20)  # 200 billable: 100 at 40, 100 at 20
    assert cents(250_000_000, item, "business")[1] == Decimal(100 * 40 + 150 * 20)  # no allowance on this plan


def _use(tenant, period: str, day: int, metric: str, value: int) -> None:
    from tideway_server.billing.models import UsageRollup

    year, month = (int(x) for x in period.split("-"))
    UsageRollup.objects.create(tenant=tenant, period=period, granularity="day", start=datetime(year, month, day, tzinfo=UTC),
                               queue=f"q{day}", metric=metric, value=value)


def _lines(invoice) -> list[tuple]:
    return [(line.kind, line.metric, line.usage_period, line.quantity, line.amount_cents) for line in invoice.lines.all()]


def test_a_final_invoice_never_changes_and_late_usage_is_corrected_on_the_next():
    from tideway_server.billing.models import Invoice
    from tideway_server.tenants.models import Plan

    _user, tenant = signup("xena")
    tenant.plan = Plan.objects.get(name="team")  # $49 a month, 50 GiB in free
    tenant.save()
    _use(tenant, "2026-10", 3, "bytes_in", 40 * GIB)
    _use(tenant, "2026-10", 9, "bytes_in", 20 * GIB)
    _use(tenant, "2026-10", 9, "messages_in", 12345)  # not priced
    draft = refresh_invoice(tenant, "2026-10")
    assert draft.status == Invoice.DRAFT and draft.price_book_version == 1
    assert _lines(draft) == [("plan", "", "2026-10", 1, 4900), ("usage", "bytes_in", "2026-10", 60 * GIB, 90)]  # 10 GiB x 9c
    assert refresh_invoice(tenant, "2026-10").total_cents == 4990  # a draft is recomputed, to the same result
    final = finalise_invoice(tenant, "2026-10")
    assert final.status == Invoice.FINAL and final.finalized_at is not None

    _use(tenant, "2026-10", 30, "bytes_in", 5 * GIB)  # reported late, after the invoice was finalised
    assert _lines(refresh_invoice(tenant, "2026-10")) == _lines(final)  # final: unchanged
    november = refresh_invoice(tenant, "2026-11")
    assert _lines(november) == [("plan", "", "2026-11", 1, 4900), ("correction", "bytes_in", "2026-10", 5 * GIB, 45)]
    assert november.total_cents == 4945
    assert "correction for 2026-10" in november.lines.get(kind="correction").description
    assert _lines(refresh_invoice(tenant, "2026-11")) == _lines(november)  # recomputing does not correct twice
    finalise_invoice(tenant, "2026-11")
    december = refresh_invoice(tenant, "2026-12")
    assert _lines(december) == [("plan", "", "2026-12", 1, 4900)]  # corrected once, on a final invoice: done


def test_invoices_over_the_api_in_json_and_csv_for_their_tenant_only(client):
    import csv
    import io

    from tideway_server.tenants.actions import do_create_api_key

    _user, tenant = signup("yuri")
    _use(tenant, "2026-10", 2, "bytes_out", 5 * GIB)  # free plan: 2 GiB free, then 5c a GiB
    invoice = finalise_invoice(tenant, "2026-10")
    key = do_create_api_key(tenant, name="billing", scopes=["consume"], acting="test")[1]
    auth = {"HTTP_AUTHORIZATION": f"Bearer {key}"}
    listed = client.get("/api/v1/invoices/", **auth).json()
    assert [(i["id"], i["period"], i["status"], i["total_cents"]) for i in listed] == [(invoice.pk, "2026-10", "final", 15)]
    detail = client.get(f"/api/v1/invoices/{invoice.pk}", **auth).json()
    assert [(line["kind"], line["metric"], line["amount_cents"]) for line in detail["lines"]] == [
        ("plan", "", 0), ("usage", "bytes_out", 15)]
    download = client.get(f"/api/v1/invoices/{invoice.pk}.csv", **auth)
    assert download["Content-Type"].startswith("text/csv") and "attachment" in download["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(download.content.decode())))
    assert sum(int(r["amount_cents"]) for r in rows if r["kind"] != "total") == int(rows[-1]["amount_cents"]) == 15

    _other, stranger = signup("zara")
    theirs = {"HTTP_AUTHORIZATION": f"Bearer {do_create_api_key(stranger, name='b', scopes=['consume'], acting='test')[1]}"}
    assert client.get("/api/v1/invoices/", **theirs).json() == []
    refused = client.get(f"/api/v1/invoices/{invoice.pk}", **theirs)
    assert refused.status_code == 404 and refused.json()["code"] == "invoice_not_found"
    assert client.get(f"/api/v1/invoices/{invoice.pk}.csv", **theirs).status_code == 404
    assert client.get("/api/v1/operator/invoices/?period=2026-10", **auth).status_code == 403


def test_operators_see_every_tenants_invoices_and_the_revenue(client):
    import base64

    from django.contrib.auth.models import User

    _u1, first = signup("ann")
    _u2, second = signup("bea")
    _use(first, "2026-10", 1, "bytes_in", 3 * GIB)  # 1 GiB free: 18c
    finalise_invoice(first, "2026-10")
    finalise_invoice(second, "2026-10")
    User.objects.create_superuser("operator", "op@example.com", "an operator password")
    basic = base64.b64encode(b"operator:an operator password").decode()
    view = client.get("/api/v1/operator/invoices/", {"period": "2026-10"}, HTTP_AUTHORIZATION=f"Basic {basic}").json()
    assert [(i["tenant"], i["total_cents"]) for i in view["invoices"]] == [(first.slug, 18), (second.slug, 0)]
    assert view["total_cents"] == 18


def test_the_console_shows_usage_and_invoices_and_downloads_the_csv(client):
    from tests.harness.console import signed_in

    user, tenant = signup("cleo")
    _use(tenant, "2026-10", 2, "bytes_out", 5 * GIB)
    _use(tenant, "2026-10", 2, "messages_out", 777)
    invoice = finalise_invoice(tenant, "2026-10")
    signed_in(client, user)
    shown = client.get("/console/usage", {"from": "2026-10-01", "to": "2026-11-01"})
    assert shown.status_code == 200 and 'data-metric="messages_out">777<' in shown.text and "usage-series" in shown.text
    assert client.get("/console/usage", {"from": "nonsense"}).status_code == 200  # the error is on the page, not a 500
    listing = client.get("/console/invoices")
    assert f'href="/console/invoices/{invoice.pk}"' in listing.text and 'data-total-cents="15"' in listing.text
    detail = client.get(f"/console/invoices/{invoice.pk}")
    assert 'id="invoice-total" data-total-cents="15">USD 0.15<' in detail.text  # money in its units (issue 43)
    download = client.get(f"/console/invoices/{invoice.pk}.csv")
    assert download["Content-Type"].startswith("text/csv") and download.content.decode().strip().endswith("15,USD,total")
