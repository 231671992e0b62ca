"""The tenant's transactions: open ones first (how long, which queues), hanging ones plain to see; a manager may
abort an open one (its producer's commit then fails; readers go on past it)."""

from __future__ import annotations

from django.shortcuts import redirect
from django.views.decorators.http import require_safe
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.operations.traffic import tenant_bootstraps
from tideway_server.gateway.operations.transactions import (
    abort_tenant_transaction,
    tenant_transactions,
)
from tideway_server.tenants import audit
from tideway_server.webui import data
from tideway_server.webui.access import member_page
from tideway_server.webui.render import confirmation, confirmed, error_page, page, sentence


def _listed(request) -> dict:
    tenant_id = request.principal.tenant.pk
    return data.run(tenant_transactions, tenant_id, tenant_bootstraps(tenant_id))


@require_safe
@member_page()
def transactions(request):
    listed = _listed(request)
    for txn in listed["transactions"]:  # open past half its timeout: the brokers abort it at its timeout
        txn["hanging"] = txn["open"] and (txn["open_for_s"] or 0) > txn["timeout_s"] / 2
        txn["queues"] = ", ".join(f"{queue} partition {partition}" for queue, partition in txn["partitions"])
    return page(request, "transactions.html", {"transactions": listed["transactions"], "errors": listed["errors"],
                                               "aborted": request.GET.get("aborted", "")})


@member_page(scope="manage")
def transaction_abort(request, name: str):
    """Abort the open transaction of ``name``, after typing its name."""
    found = next((t for t in _listed(request)["transactions"] if t["name"] == name), None)
    if found is None or not found["open"]:
        return error_page(request, 404, f"Transactional id {name} has no open transaction.")
    if not confirmed(request, name):
        return confirmation(
            request, title=f"Abort the transaction of {name}",
            consequence=f"What the open transaction of {name} wrote (on "
                        f"{', '.join(f'{q} partition {p}' for q, p in found['partitions']) or 'no queue yet'}) is discarded: no "
                        "read_committed reader will see it, and its consumer offsets do not count. Its producer's "
                        "commit fails; it may begin another transaction.",
            undo="This cannot be undone: the producer must write those messages again.",
            word=name, word_label="the transactional id", button="Abort the transaction",
            cancel="/console/transactions",
            error="" if request.method != "POST" else f"type the transactional id ({name}) to abort its transaction")
    try:
        data.run(abort_tenant_transaction, request.principal.tenant.pk, found["bootstrap"], name)
    except GatewayError as exc:
        return error_page(request, exc.status, sentence(data.refusal(exc)))
    audit.record(request.principal.tenant, request.principal.actor, "transaction.abort", name,
                 producer_epoch=found["producer_epoch"])
    return redirect(f"/console/transactions?aborted={name}")
