"""`tideway queue`, `tideway dlq`, `tideway groups`: queue groups' receives and acknowledgements, dead letters,
and groups' positions and lag."""

from __future__ import annotations

import argparse
import json
import sys

from tideway_server.brokers.cli.options import (
    bootstrap_argument,
    client_for,
    message_json,
    run_async,
)

from tideway.protocol import errors


def add_queue(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "queue",
        help="receive and acknowledge messages as a queue group (per-message acks)",
        description=(
            "Queue model: any member of the group may receive any message; each received message is locked for the "
            "visibility timeout and must be acked (done), nacked (redelivered after a backoff, dead-lettered at the "
            "delivery limit) or extended. Receipts look like PARTITION:OFFSET:DELIVERY."
        ),
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    receive = actions.add_parser("receive", help="lock and print up to --max messages as JSON lines")
    receive.add_argument("--max", type=int, default=10, help="messages at most (default %(default)s)")
    receive.add_argument("--wait-ms", type=int, default=0, help="long polling: wait this long for the first message (max 30000)")
    receive.add_argument("--lock-ms", type=int, default=0, help="visibility timeout for these messages (default: the queue's)")
    receive.add_argument("--ack", action="store_true", help="acknowledge what was printed at once")
    ack = actions.add_parser("ack", help="acknowledge (accept) messages by receipt")
    nack = actions.add_parser("nack", help="release messages for redelivery")
    nack.add_argument("--delay-ms", type=int, help="redeliver after this long (default: the queue's backoff with jitter)")
    nack.add_argument("--error", default="", help="why (kept in the dead-letter headers)")
    nack.add_argument("--reject", action="store_true", help="send straight to the dead-letter topic instead")
    extend = actions.add_parser("extend", help="keep messages locked longer")
    extend.add_argument("--seconds", type=float, required=True, help="new lock, from now (max 12 h)")
    for sub in (receive, ack, nack, extend):
        bootstrap_argument(sub)
        sub.add_argument("--group", required=True, help="the queue group")
        sub.add_argument("--topic", required=True, help="the queue's topic")
    for sub in (ack, nack, extend):
        sub.add_argument("receipts", nargs="+", metavar="RECEIPT", help="receipts printed by receive ('-': read them from stdin)")
    parser.set_defaults(handler=lambda a: run_async(_queue(a)))


async def _queue(args: argparse.Namespace) -> int:
    from tideway.native.queue import QueueConsumer

    receipts = getattr(args, "receipts", None) or []
    if receipts == ["-"]:
        receipts = [line.strip() for line in sys.stdin if line.strip()]
    async with client_for(args) as client, QueueConsumer(client, args.group, args.topic) as queue:
        try:
            if args.action == "receive":
                messages = await queue.receive(args.max, wait_ms=args.wait_ms, lock_ms=args.lock_ms)
                for message in messages:
                    print(json.dumps(message_json(message)), flush=True)
                if args.ack:
                    await queue.ack(messages)
                print(f"received {len(messages)} message(s)" + (" and acked them" if args.ack else ""), file=sys.stderr)
            elif args.action == "ack":
                await queue.ack(receipts)
                print(f"acked {len(receipts)} message(s)", file=sys.stderr)
            elif args.action == "nack":
                if args.reject:
                    await queue.reject(receipts, error=args.error)
                else:
                    await queue.nack(receipts, delay_ms=args.delay_ms, error=args.error)
                print(f"{'rejected' if args.reject else 'released'} {len(receipts)} message(s)", file=sys.stderr)
            else:
                deadlines = await queue.extend(receipts, int(args.seconds * 1000))
                print(f"extended {len(deadlines)} lock(s) to {max(deadlines)} ms", file=sys.stderr)
        except errors.TidewayError as exc:
            print(f"tideway queue {args.action}: {exc}", file=sys.stderr)
            return 1
    return 0


def add_dlq(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "dlq",
        help="list or redrive a queue's dead letters",
        description="Dead letters carry headers naming their origin (topic, partition, offset), group, delivery count, "
        "last error and first/last delivery times. Redrive publishes them back to their origin topic.",
    )
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = actions.add_parser("list", help="print dead letters not redriven yet, as JSON lines")
    listing.add_argument("--limit", type=int, default=100)
    again = actions.add_parser("redrive", help="publish dead letters back to their origin topic")
    again.add_argument("--rate", type=float, default=100.0, help="messages per second (default %(default)s)")
    again.add_argument("--limit", type=int, help="stop after this many")
    for sub in (listing, again):
        bootstrap_argument(sub)
        sub.add_argument("--topic", required=True, help="the queue's topic (its dead-letter topic is TOPIC.dlq unless --dlq-topic)")
        sub.add_argument("--dlq-topic", help="the dead-letter topic, if the queue sets queue.dead.letter.topic")
    parser.set_defaults(handler=lambda a: run_async(_dlq(a)))


async def _dlq(args: argparse.Namespace) -> int:
    import base64

    from tideway.native.queue import list_dead_letters, redrive

    dlq_topic = args.dlq_topic or f"{args.topic}.dlq"
    async with client_for(args) as client:
        try:
            if args.action == "list":
                for letter in await list_dead_letters(client, dlq_topic, limit=args.limit):
                    value = letter["value"]
                    try:
                        shown = {"value": None if value is None else value.decode()}
                    except UnicodeDecodeError:
                        shown = {"value_base64": base64.b64encode(value).decode()}
                    print(json.dumps({"partition": letter["partition"], "offset": letter["offset"], **shown, "headers": letter["headers"]}))
            else:
                moved = await redrive(client, dlq_topic, rate_per_s=args.rate, limit=args.limit)
                print(f"redrove {moved} message(s) from {dlq_topic}", file=sys.stderr)
        except errors.TidewayError as exc:
            print(f"tideway dlq {args.action}: {exc}", file=sys.stderr)
            return 1
    return 0


def add_groups(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="describe a consumer or queue group: members, positions, lag")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="print the group's members and per-partition lag as JSON")
    bootstrap_argument(describe)
    describe.add_argument("--group", required=True)
    describe.add_argument("--type", choices=["stream", "queue"], default="stream",
                          help="with a tenant's key: a stream (consumer) group or a queue group of that name (default %(default)s)")
    parser.set_defaults(handler=lambda a: run_async(_groups(a)))


async def _groups(args: argparse.Namespace) -> int:
    from tideway.native.group import describe_group, group_lag

    async with client_for(args) as client:
        try:
            described = await describe_group(client, args.group, args.type)
            lag = await group_lag(client, args.group, args.type)
        except errors.TidewayError as exc:
            print(f"tideway groups describe: {exc}", file=sys.stderr)
            return 1
    members = [
        {"member_id": mb.member_id, "epoch": mb.member_epoch, "assigned": [f"{tp.topic}-{tp.partition}" for tp in mb.assigned]}
        for mb in described.members
    ]
    print(json.dumps({"group": args.group, "type": described.group_type or "unknown", "coordinator": described.coordinator, "members": members, "partitions": lag}, indent=2))
    return 0
