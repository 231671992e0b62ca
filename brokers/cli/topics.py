"""`tideway topics`: create, list, describe, grow and delete topics."""

from __future__ import annotations

import argparse
import sys

from tideway_server.brokers.cli.options import (
    bootstrap_argument,
    run_async,
    with_client,
)

# -- topics ---------------------------------------------------------------------------------


def add_topics(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,describe,add-partitions,delete}")

    create = actions.add_parser("create", help="create a topic", description="Create a topic on the brokers.")
    bootstrap_argument(create)
    create.add_argument("name")
    create.add_argument("--partitions", type=int, default=1, help="number of partitions (default %(default)s)")
    create.add_argument("--replication-factor", type=int, default=1, help="replicas per partition (default %(default)s)")
    create.add_argument("--flush", help="fsync policy: always (before every ack), none (page cache; the default) or MS (every MS milliseconds)")
    create.add_argument("--retention-ms", type=int, help="delete segments older than this (-1: keep forever; default 7 days)")
    create.add_argument("--retention-bytes", type=int, help="delete old segments beyond this many bytes per partition (default -1: no limit)")
    create.add_argument("--segment-bytes", type=int, help="roll to a new segment at this size (default 1 GiB)")
    create.add_argument("--segment-ms", type=int, help="roll to a new segment after this age (default 7 days)")
    create.add_argument("--max-message-bytes", type=int, help="largest batch a producer may send (default 1 MiB)")
    create.add_argument("--config", action="append", default=[], metavar="KEY=VALUE", help="any other topic setting, e.g. index.interval.bytes=4096")
    create.set_defaults(handler=lambda a: run_async(_topics_create(a)))

    listing = actions.add_parser("list", help="list topics")
    bootstrap_argument(listing)
    listing.set_defaults(handler=lambda a: run_async(_topics_list(a)))

    describe = actions.add_parser("describe", help="show a topic's settings and partitions")
    bootstrap_argument(describe)
    describe.add_argument("name", nargs="?", help="topic (default: all)")
    describe.set_defaults(handler=lambda a: run_async(_topics_describe(a)))

    grow = actions.add_parser("add-partitions", help="grow a topic to more partitions", description="Raise a topic's partition count. Existing partitions keep their data; keys may map to new partitions from now on.")
    bootstrap_argument(grow)
    grow.add_argument("name")
    grow.add_argument("--partitions", type=int, required=True, help="the new total number of partitions")
    grow.set_defaults(handler=lambda a: run_async(_topics_add_partitions(a)))

    delete = actions.add_parser("delete", help="delete a topic and its data")
    bootstrap_argument(delete)
    delete.add_argument("name")
    delete.set_defaults(handler=lambda a: run_async(_topics_delete(a)))


async def _topics_create(args: argparse.Namespace) -> int:
    configs: dict[str, str] = {}
    for option, setting in [
        ("flush", "flush"),
        ("retention_ms", "retention.ms"),
        ("retention_bytes", "retention.bytes"),
        ("segment_bytes", "segment.bytes"),
        ("segment_ms", "segment.ms"),
        ("max_message_bytes", "max.message.bytes"),
    ]:
        value = getattr(args, option)
        if value is not None:
            configs[setting] = str(value)
    for item in args.config:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"tideway: --config {item!r} is not KEY=VALUE", file=sys.stderr)
            return 2
        configs[key] = value

    async def action(client) -> int:
        await client.create_topic(args.name, partitions=args.partitions, replication_factor=args.replication_factor, configs=configs)
        print(f"created topic {args.name} with {args.partitions} partition(s)")
        return 0

    return await with_client(args, action)


async def _topics_list(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        for name in await client.list_topics():
            print(name)
        return 0

    return await with_client(args, action)


async def _topics_describe(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        for topic in await client.describe_topics([args.name] if args.name else None):
            settings = " ".join(f"{k}={v}" for k, v in sorted(topic.configs.items()))
            print(f"topic {topic.name}: {len(topic.partitions)} partition(s) {settings}")
            for p in topic.partitions:
                print(
                    f"  partition {p.partition}: leader {p.leader} start {p.log_start_offset} "
                    f"end {p.log_end_offset} hw {p.high_watermark} size {p.size_bytes} B in {p.segments} segment(s)"
                )
        return 0

    return await with_client(args, action)


async def _topics_add_partitions(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        await client.create_partitions(args.name, args.partitions)
        print(f"topic {args.name} now has {args.partitions} partitions")
        return 0

    return await with_client(args, action)


async def _topics_delete(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        await client.delete_topic(args.name)
        print(f"deleted topic {args.name}")
        return 0

    return await with_client(args, action)
