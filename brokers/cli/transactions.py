"""`tideway transactions`: list, describe and abort transactions (for operators: a transaction left open holds
read_committed readers of its partitions back until it ends)."""

from __future__ import annotations

import argparse
import time

from tideway_server.brokers.cli.options import bootstrap_argument, run_async, with_client

from tideway.native.transactions import abort_transaction, describe_transaction, list_transactions

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")


def add_transactions(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("transactions", help="list, describe and abort transactions")
    actions = parser.add_subparsers(dest="action", required=True, metavar="{list,describe,abort}")

    listing = actions.add_parser(
        "list", help="every transactional id the coordinators hold",
        description="List transactional ids with their state, producer id and epoch, and how long the open ones "
                    "have been open. Every broker is asked (each coordinates its share of the ids).")
    bootstrap_argument(listing)
    listing.add_argument("--state", action="append", choices=STATES, help="only this state (repeatable)")
    listing.add_argument("--open-longer-than-s", type=float, default=None, metavar="SECONDS",
                         help="only transactions open longer than this (hanging ones)")
    listing.set_defaults(handler=lambda a: run_async(_list(a)))

    describe = actions.add_parser("describe", help="one transactional id: state, producer, partitions, age")
    bootstrap_argument(describe)
    describe.add_argument("transactional_id")
    describe.set_defaults(handler=lambda a: run_async(_describe(a)))

    abort = actions.add_parser(
        "abort", help="abort a transactional id's open transaction",
        description="Abort the open transaction of a transactional id: its records are never read by read_committed "
                    "consumers and read_committed reads of its partitions go on past it. Its producer gets an error "
                    "at its next commit and may begin another transaction.")
    bootstrap_argument(abort)
    abort.add_argument("transactional_id")
    abort.set_defaults(handler=lambda a: run_async(_abort(a)))


def _age(started_ms: int) -> str:
    return "-" if started_ms < 0 else f"{(time.time() * 1000 - started_ms) / 1000:.1f}s"


async def _list(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        older = -1 if args.open_longer_than_s is None else int(args.open_longer_than_s * 1000)
        found = await list_transactions(client, states=args.state, older_than_ms=older)
        print(f"{'TRANSACTIONAL ID':40} {'STATE':15} {'PRODUCER':>20} {'EPOCH':>6} {'OPEN FOR':>9}")
        for txn in found:
            print(f"{txn.transactional_id:40} {txn.state:15} {txn.producer_id:>20} {txn.producer_epoch:>6} "
                  f"{_age(txn.started_ms):>9}")
        return 0

    return await with_client(args, action)


async def _describe(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        txn = await describe_transaction(client, args.transactional_id)
        print(f"transactional id {txn.transactional_id}: {txn.state}, producer {txn.producer_id} epoch "
              f"{txn.producer_epoch}, timeout {txn.timeout_ms} ms, open for {_age(txn.started_ms)}")
        for ref in txn.partitions:
            print(f"  {ref.topic}-{ref.partition}")
        return 0

    return await with_client(args, action)


async def _abort(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        txn = await abort_transaction(client, args.transactional_id)
        print(f"aborted the open transaction of {txn.transactional_id} ({len(txn.partitions)} partition(s))")
        return 0

    return await with_client(args, action)
