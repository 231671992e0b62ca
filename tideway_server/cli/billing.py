"""``tideway usage`` and ``tideway invoices``: a tenant's metered usage and invoices, over the REST API."""

from __future__ import annotations

import json
import sys

from tideway_server.cli.api import api_options as _api_options
from tideway_server.cli.api import call


def add_commands(subparsers) -> None:
    usage = subparsers.add_parser(
        "usage", help="what your tenant used (messages, bytes, requests, storage), by day or hour",
        description="Metered usage of the tenant whose API key you give, from the latest run of the usage job "
        "(GET /api/v1/usage). By default this month so far, by day and metric.")
    _api_options(usage)
    usage.add_argument("--from", dest="start", help="start, ISO 8601 (default: the start of this month)")
    usage.add_argument("--to", dest="end", help="end, exclusive (default: now)")
    usage.add_argument("--granularity", choices=["day", "hour"], default="day")
    usage.add_argument("--group-by", choices=["metric", "queue"], default="metric")
    usage.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    usage.set_defaults(handler=_usage)

    invoices = subparsers.add_parser(
        "invoices", help="your tenant's invoices, or one invoice's lines (or its CSV)",
        description="Without an id: every invoice (period, status, total). With one: its lines; --csv prints the CSV.")
    _api_options(invoices)
    invoices.add_argument("invoice", nargs="?", type=int, help="an invoice id (see the list)")
    invoices.add_argument("--csv", action="store_true", help="the invoice as CSV")
    invoices.add_argument("--json", action="store_true", help="print the API's answer as JSON")
    invoices.set_defaults(handler=_invoices)


def _get(args, path: str, params: dict | None = None):
    return call(args, "GET", path, params=params)


def _usage(args) -> int:
    params = {"granularity": args.granularity, "group_by": args.group_by}
    if args.start:
        params["from"] = args.start
    if args.end:
        params["to"] = args.end
    body = _get(args, "/api/v1/usage", params).json()
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    print(f"usage from {body['from']} to {body['to']} (computed {body['computed_at'] or 'never yet'})")
    for point in body["series"]:
        queue = f"{point['queue'] or '-':<24} " if args.group_by == "queue" else ""
        print(f"{point['start']}  {queue}{point['metric']:<22} {point['value']:>16} {point['unit']}")
    for metric, value in sorted(body["totals"].items()):
        print(f"total  {metric:<22} {value:>16}")
    return 0


def _invoices(args) -> int:
    if args.invoice is None:
        rows = _get(args, "/api/v1/invoices/").json()
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        for row in rows:
            print(f"{row['id']:>6}  {row['period']}  {row['status']:<5}  {row['total_cents'] / 100:>12.2f} {row['currency']}")
        if not rows:
            print("no invoice yet")
        return 0
    if args.csv:
        sys.stdout.write(_get(args, f"/api/v1/invoices/{args.invoice}.csv").text)
        return 0
    body = _get(args, f"/api/v1/invoices/{args.invoice}").json()
    if args.json:
        print(json.dumps(body, indent=2))
        return 0
    print(f"invoice {body['id']} for {body['period']} ({body['status']}, price book v{body['price_book_version']})")
    for line in body["lines"]:
        print(f"  {line['description']:<60} {line['usage_period']}  {line['amount_cents'] / 100:>10.2f}")
    print(f"  {'total':<60} {'':7}  {body['total_cents'] / 100:>10.2f} {body['currency']}")
    return 0
