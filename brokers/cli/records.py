"""`tideway produce` and `tideway consume`: stdin to a topic, a topic to stdout (alone or in a group)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from tideway_server.brokers.cli.options import (
    bootstrap_argument,
    client_for,
    run_async,
)

from tideway.protocol import errors

# -- produce ------------------------------------------------------------------------------------


def add_produce(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="send stdin to a topic, one message per line",
        description="Read standard input and send every line (without its newline) as one message. "
        "Prints a summary to stderr; exits 1 if any message was not acknowledged.",
    )
    bootstrap_argument(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--key", help="key for every message (same key: same partition, in order)")
    parser.add_argument("--partition", type=int, help="send every message to this partition")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="1", help="acknowledgement level (default %(default)s)")
    parser.add_argument("--linger-ms", type=int, default=5, help="wait up to this long to fill a batch (default %(default)s)")
    parser.add_argument("--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none")
    parser.set_defaults(handler=lambda a: run_async(_produce(a)))


async def stdin_lines(stream):
    """The lines of ``stream`` (stdin), whatever it is: a pipe, a regular file or a terminal.

    Pipes and sockets are read by the event loop. A regular file cannot be
    (uvloop aborts the process on one: issue 15), and a terminal delivers a
    line at a time, so both are read in a worker thread: a file in batches of
    about 1 MiB of lines, a terminal line by line.
    """
    import stat

    mode = os.fstat(stream.fileno()).st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        reader = asyncio.StreamReader(limit=64 << 20)
        await asyncio.get_running_loop().connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stream)
        while line := await reader.readline():
            yield line
    elif stream.isatty():
        while line := await asyncio.to_thread(stream.readline):
            yield line
    else:
        while lines := await asyncio.to_thread(stream.readlines, 1 << 20):
            for line in lines:
                yield line


async def _produce(args: argparse.Namespace) -> int:
    from tideway.native import Producer

    key = args.key.encode() if args.key is not None else None
    started = time.monotonic()
    sent = failed = 0
    first_error: BaseException | None = None
    client = client_for(args)
    try:
        producer = Producer(client, acks=args.acks, linger_ms=args.linger_ms, compression=args.compression)
        await client.start()
        await producer.start()
    except errors.TidewayError as exc:
        print(f"tideway produce: {exc}", file=sys.stderr)
        await client.close()
        return 1
    futures = []
    try:
        async for line in stdin_lines(sys.stdin.buffer):
            value = line[:-1] if line.endswith(b"\n") else line
            futures.append(await producer.send(args.topic, value, key=key, partition=args.partition))
            sent += 1
        await producer.flush()
    except errors.TidewayError as exc:
        first_error = exc
    finally:
        await producer.stop()
        await client.close()
    acknowledged = 0
    for future in futures:
        error = future.exception()
        if error is None:
            acknowledged += 1
        else:
            failed += 1
            first_error = first_error or error
    elapsed = time.monotonic() - started
    print(
        f"produced {acknowledged} of {sent} message(s) to {args.topic} in {elapsed:.2f}s"
        + (f"; {failed} not acknowledged: {first_error}" if failed or first_error else ""),
        file=sys.stderr,
    )
    return 1 if failed or first_error else 0


# -- consume --------------------------------------------------------------------------------------


def add_consume(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="print a topic's messages, one per line",
        description="Print message values, one per line, from every partition of a topic (or --partition).",
    )
    bootstrap_argument(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--from", dest="start", default="latest", help="earliest, latest, an OFFSET, or @TIMESTAMP_MS (default %(default)s)")
    parser.add_argument("--partition", type=int, action="append", help="read only this partition (repeatable)")
    parser.add_argument("--max", type=int, help="exit after this many messages")
    parser.add_argument("--idle-exit-ms", type=int, help="exit when nothing arrives for this long")
    parser.add_argument(
        "--group",
        help="consume as a member of this stream group: partitions are shared with the other members and "
        "positions are committed after every printed batch; --from then applies only where the group has no committed offset",
    )
    parser.set_defaults(handler=lambda a: run_async(_consume_group(a) if a.group else _consume(a)))


async def _consume_group(args: argparse.Namespace) -> int:
    from tideway.native.group import GroupConsumer

    if args.start not in ("earliest", "latest"):
        print("tideway consume: with --group, --from must be earliest or latest (use seek for offsets)", file=sys.stderr)
        return 2
    client = client_for(args)
    member = GroupConsumer(client, args.group, [args.topic], auto_offset_reset=args.start, enable_auto_commit=False)

    async def start() -> None:
        await client.start()
        await member.start()

    async def stop() -> None:
        await member.stop()
        await client.close()

    return await _print_values(args, start, member.getmany, member.commit, stop)


async def _consume(args: argparse.Namespace) -> int:
    from tideway.native import Consumer

    position: str | int = args.start
    if isinstance(position, str) and position.lstrip("-").isdigit():
        position = int(position)
    client = client_for(args)
    consumer = Consumer(client, auto_offset_reset="earliest")

    async def start() -> None:
        await client.start()
        await consumer.start()
        partitions = args.partition or range(len(await consumer.client.partitions_for(args.topic)))
        await consumer.assign([(args.topic, p) for p in partitions], start=position)

    async def nothing() -> None:
        return None

    async def stop() -> None:
        await consumer.stop()
        await client.close()

    return await _print_values(args, start, consumer.getmany, nothing, stop)


async def _print_values(args: argparse.Namespace, start, getmany, after_batch, stop) -> int:
    """Print each value on its own line until --max or --idle-exit-ms; ``after_batch`` runs after each flush."""
    out = sys.stdout.buffer
    count = 0
    try:
        await start()
        idle_deadline = None if args.idle_exit_ms is None else time.monotonic() + args.idle_exit_ms / 1000
        while args.max is None or count < args.max:
            remaining = None if args.max is None else args.max - count
            batch = await getmany(timeout_ms=200, max_records=remaining)
            if not batch:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                continue
            for records in batch.values():
                out.write(b"".join((record.value or b"") + b"\n" for record in records))
                count += len(records)
            out.flush()
            await after_batch()
            if args.idle_exit_ms is not None:
                idle_deadline = time.monotonic() + args.idle_exit_ms / 1000
    except errors.TidewayError as exc:
        print(f"tideway consume: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        return 0
    finally:
        await stop()
    return 0


# -- queues, dead letters, groups ----------------------------------------------------------------


