"""A tenant's transactions, as its coordinators hold them: the console's list (open, hanging and ended ones),
the age of the oldest open one (the ``oldest_transaction_seconds`` alert metric: a hung transaction holds every
read_committed reader of its partitions back), and aborting one.

Transactional ids and topics are shown by the tenant's own names (``orders-enricher``, not ``t7.txn.orders-
enricher``); other tenants' and the platform's own (the gateway's ``_gateway.*``) are never listed.
"""

from __future__ import annotations

import time

from tideway_server.gateway import pool
from tideway_server.gateway.errors import GatewayError

from tideway.native.transactions import abort_transaction, list_transactions
from tideway.protocol import errors
from tideway.protocol.names import TenantNames

OPEN_STATES = ("Ongoing", "PrepareCommit", "PrepareAbort")


async def tenant_transactions(tenant_id: int, bootstraps: list[str]) -> dict:
    """Every transactional id of the tenant on these clusters, open ones first (the longest open first), as
    ``{"transactions": [{"name", "state", "open", "open_for_s", "timeout_s", "producer_id", "producer_epoch",
    "partitions": [[queue, partition], ...], "bootstrap"}], "errors": [why a cluster is missing]}``."""
    listed: dict[str, list | str] = {}
    for bootstrap in bootstraps:
        try:
            listed[bootstrap] = await list_transactions(await pool.client(bootstrap))
        except (errors.TidewayError, OSError) as exc:
            listed[bootstrap] = f"a cluster did not answer: {exc}"
    return tenant_view(tenant_id, listed)


def tenant_view(tenant_id: int, listed: dict[str, list | str]) -> dict:
    """The tenant's share of what clusters listed ({bootstrap: their TransactionDescriptions, or why the cluster
    did not answer}): ``{"transactions": [...], "errors": [...]}`` as ``tenant_transactions`` answers."""
    names = TenantNames(tenant_id)
    now_ms = time.time() * 1000
    found, failed = [], []
    for bootstrap, descriptions in listed.items():
        if isinstance(descriptions, str):
            failed.append(descriptions)
            continue
        for txn in descriptions:
            name = names.own_transactional_id(txn.transactional_id)
            if name is None:
                continue
            is_open = txn.state in OPEN_STATES
            partitions = [[queue, p.partition] for p in txn.partitions
                          if (queue := names.own_topic(p.topic)) is not None]
            found.append({"name": name, "state": txn.state, "open": is_open,
                          "open_for_s": round(max(0.0, now_ms - txn.started_ms) / 1000, 1)
                          if is_open and txn.started_ms > 0 else None,
                          "timeout_s": txn.timeout_ms / 1000, "producer_id": txn.producer_id,
                          "producer_epoch": txn.producer_epoch, "partitions": partitions, "bootstrap": bootstrap})
    found.sort(key=lambda t: (not t["open"], -(t["open_for_s"] or 0), t["name"]))
    return {"transactions": found, "errors": failed}


def oldest_open_s(listed: dict) -> float | None:
    """The alert metric: how long the tenant's oldest open transaction has been open (0 when none is); None when
    a cluster did not answer and nothing open was seen (no data, rather than a false all-clear)."""
    ages = [t["open_for_s"] or 0.0 for t in listed["transactions"] if t["open"]]
    if ages:
        return max(ages)
    return None if listed["errors"] else 0.0


async def abort_tenant_transaction(tenant_id: int, bootstrap: str, name: str) -> dict:
    """Abort the open transaction of the tenant's transactional id ``name`` (its producer may begin another;
    its commit of this one fails). 409 ``conflict`` when none is open."""
    client = await pool.client(bootstrap)
    try:
        txn = await abort_transaction(client, TenantNames(tenant_id).transactional_id(name))
    except errors.InvalidTxnStateError:
        raise GatewayError("conflict", f"transactional id {name!r} has no open transaction") from None
    except errors.TransactionalIdNotFoundError:
        raise GatewayError("not_found", f"transactional id {name!r} does not exist") from None
    return {"name": name, "state": txn.state, "producer_id": txn.producer_id, "producer_epoch": txn.producer_epoch}
