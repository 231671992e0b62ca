"""`tideway usage` and `tideway invoices` against the API served by Django's live server."""

from __future__ import annotations

import json

import pytest
from tideway_server.billing.pricing import GIB, finalise_invoice

from tests.billing.test_invoices import _use
from tests.harness.console import signup
from tideway_server.cli.main import main

pytestmark = pytest.mark.django_db(transaction=True, serialized_rollback=True)


def test_the_cli_prints_usage_and_invoices(live_server, capsys):
    from tideway_server.tenants.actions import do_create_api_key

    _user, tenant = signup("dora")
    _use(tenant, "2026-10", 4, "bytes_out", 5 * GIB)
    invoice = finalise_invoice(tenant, "2026-10")
    key = do_create_api_key(tenant, name="cli", scopes=["consume"], acting="test")[1]
    api = ["--api", live_server.url, "--api-key", key]

    assert main(["usage", *api, "--from", "2026-10-01", "--to", "2026-11-01", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["totals"] == {"bytes_out": 5 * GIB}
    assert main(["usage", *api, "--from", "2026-10-01", "--to", "2026-11-01", "--group-by", "queue"]) == 0
    assert "q4" in capsys.readouterr().out
    assert main(["invoices", *api]) == 0
    assert f"{invoice.pk:>6}  2026-10  final" in capsys.readouterr().out
    assert main(["invoices", str(invoice.pk), "--csv", *api]) == 0
    assert capsys.readouterr().out.strip().endswith("15,USD,total")
    with pytest.raises(SystemExit):
        main(["invoices", "999999", *api])
    assert "invoice_not_found" in capsys.readouterr().err
