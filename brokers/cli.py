"""Command-line commands of the data plane: broker, topics, produce, consume.

``tideway_cli.main`` assembles these with the control plane's commands.
Everything here talks to brokers over the native protocol only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

from tideway.protocol import errors

__all__ = ["add_commands", "run_async"]

DEFAULT_BOOTSTRAP = "127.0.0.1:9401"


def run_async(coroutine) -> int:
    """Run ``coroutine`` on uvloop when installed; return its exit code."""
    try:
        import uvloop

        return uvloop.run(coroutine)
    except ImportError:
        return asyncio.run(coroutine)


def host_port(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not HOST:PORT")
    return host or "127.0.0.1", int(port)


def _positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of at least 1")
    return int(text)


def _non_negative_seconds(text: str) -> float:
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds of at least 0")
    return seconds


def _bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("TIDEWAY_BOOTSTRAP", DEFAULT_BOOTSTRAP),
        help="broker addresses HOST:PORT[,HOST:PORT...] (default: $TIDEWAY_BOOTSTRAP or %(default)s)",
    )
    credential_arguments(parser)


def credential_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--api-key",
        default=os.environ.get("TIDEWAY_API_KEY"),
        help="a tenant API key (tw_...) or a service key (tws_...) (default: $TIDEWAY_API_KEY; without one, the "
        "operator key of the deployment whose cluster secret is in $TIDEWAY_HOME/cluster-secret, if readable)",
    )
    parser.add_argument("--cafile", default=os.environ.get("TIDEWAY_CAFILE"),
                        help="connect with TLS, trusting this PEM CA bundle (default: $TIDEWAY_CAFILE)")
    parser.add_argument("--tls", action="store_true", help="connect with TLS, trusting the system's CAs")


def server_security_arguments(parser: argparse.ArgumentParser, *, peers: str) -> None:
    """The cluster secret and TLS flags of a server process (a broker or a controller)."""
    parser.add_argument(
        "--cluster-secret-file",
        help="file holding the deployment's cluster secret (hex); $TIDEWAY_CLUSTER_SECRET wins over it "
        "(default $TIDEWAY_HOME/cluster-secret, generated with mode 0600 when missing)",
    )
    parser.add_argument("--certfile", help="serve with TLS, with this PEM certificate (chain)")
    parser.add_argument("--keyfile", help="the certificate's PEM private key (with --certfile)")
    parser.add_argument("--cafile", help=f"PEM CAs that sign {peers} certificates (with --certfile)")


def cli_credentials(args: argparse.Namespace):
    """--api-key, else $TIDEWAY_API_KEY, else this machine's operator key (from the deployment's cluster secret)."""
    from brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        ClusterSecretError,
        load_cluster_secret,
        service_key,
    )
    from tideway.native.credentials import ApiKey

    if getattr(args, "api_key", None):
        return ApiKey(args.api_key)
    home = os.environ.get("TIDEWAY_HOME", "var")
    try:
        secret = load_cluster_secret(os.path.join(home, CLUSTER_SECRET_FILE))
    except (ClusterSecretError, OSError):
        return None  # the broker will say that it needs a key
    return ApiKey(service_key(secret, "operator"))


def cli_tls(args: argparse.Namespace):
    from tideway.native.conn import tls_context

    if getattr(args, "cafile", None) or getattr(args, "tls", False):
        return tls_context(getattr(args, "cafile", None))
    return None


def _client(args: argparse.Namespace, bootstrap: str | None = None):
    """A TidewayClient with the command line's credentials and TLS settings (not started)."""
    from tideway.native import TidewayClient

    return TidewayClient(bootstrap or args.bootstrap, credentials=cli_credentials(args), ssl_context=cli_tls(args))


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    _add_broker(subparsers)
    _add_topics(subparsers)
    _add_produce(subparsers)
    _add_consume(subparsers)
    _add_queue(subparsers)
    _add_dlq(subparsers)
    _add_groups(subparsers)


# -- broker ---------------------------------------------------------------------------


def _add_broker(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "broker",
        help="run one broker process",
        description="Run a broker: serves the native protocol and stores partition logs under --data. "
        "Stops cleanly (flush, checkpoints) on SIGTERM or Ctrl-C.",
    )
    parser.add_argument("--id", type=int, default=1, help="broker id, unique in the cluster (default %(default)s)")
    parser.add_argument("--data", default="var/b1", help="data directory (default %(default)s)")
    parser.add_argument("--listen", type=host_port, default=("127.0.0.1", 9401),
                        help="HOST:PORT of the client listener: tenants' clients, the gateway, the CLI (default 127.0.0.1:9401)")
    parser.add_argument("--advertise", type=host_port, help="HOST:PORT clients should use, if not --listen")
    parser.add_argument(
        "--internal-listen",
        default="auto",
        help="HOST:PORT of the internal listener: replication, the controller, other brokers' coordinators; only cluster "
        "peers holding the cluster secret may use it ('auto' = --listen's host, port + 100)",
    )
    parser.add_argument("--internal-advertise", type=host_port, help="HOST:PORT peers should use, if not --internal-listen")
    parser.add_argument(
        "--metrics-listen",
        default="auto",
        help="HOST:PORT of the Prometheus /metrics endpoint, which names every topic: keep it internal "
        "('auto' = the internal listener's host, --listen's port + 1000; 'off' disables)",
    )
    server_security_arguments(parser, peers="the other brokers' and the controller's")
    parser.add_argument("--max-connections", type=int, default=10_000, help="client connections open at once (default %(default)s)")
    parser.add_argument("--max-connections-per-principal", type=int, default=1_000,
                        help="client connections of one API key or service (default %(default)s)")
    parser.add_argument("--max-unauthenticated-connections", type=int, default=1_000,
                        help="client connections not yet authenticated (default %(default)s)")
    parser.add_argument("--max-in-flight-per-connection", type=int, default=100,
                        help="requests in flight on one connection; reading pauses beyond (default %(default)s)")
    parser.add_argument(
        "--retention-check-interval-ms",
        type=int,
        default=300_000,
        help="how often old segments are deleted by retention (default %(default)s)",
    )
    parser.add_argument("--max-request-bytes", type=int, default=100 << 20, help="largest request frame accepted (default %(default)s)")
    parser.add_argument(
        "--request-buffer-mb", type=_positive_int, default=256,
        help="MiB of requests in progress the broker holds at once, from a request's first byte to its answer; "
        "one that would pass it is read past unkept and answered BROKER_BUSY, a retriable error (default %(default)s)")
    parser.add_argument(
        "--request-buffer-per-principal-mb", type=_positive_int, default=64,
        help="the share of --request-buffer-mb one API key (or service, or peer) may hold (default %(default)s)")
    parser.add_argument(
        "--request-read-timeout-ms", type=_positive_int, default=30_000,
        help="a request must arrive whole within this of its first byte, or its connection is closed "
        "(default %(default)s)")
    parser.add_argument("--log-cleaner-interval-ms", type=int, default=15_000, help="how often compacted topics are cleaned (default %(default)s)")
    parser.add_argument(
        "--controller",
        help="controller addresses HOST:PORT[,HOST:PORT...]: join that cluster (default: run standalone, leading every partition alone)",
    )
    parser.add_argument("--rack", help="rack or zone of this broker, for replica placement")
    parser.add_argument(
        "--replica-lag-time-max-ms",
        type=int,
        default=10_000,
        help="a follower not caught up for this long leaves the ISR (default %(default)s)",
    )
    parser.add_argument(
        "--scrub-rate",
        type=float,
        default=8,
        help="MiB/s at which the scrubber re-reads the logs and checks every batch's CRC, so damage on disk is "
        "found and repaired from another replica before anyone reads it; 0 turns it off (default %(default)s)",
    )
    parser.add_argument(
        "--scrub-pass-interval",
        type=_non_negative_seconds,
        default=3600,
        help="seconds between the starts of two scrubber passes over every log; a pass that takes longer is "
        "followed by the next at once (default %(default)s)",
    )
    parser.add_argument(
        "--usage-interval-ms",
        type=int,
        default=1_000,
        help="how often the broker writes what each tenant used (messages and bytes in and out, requests, storage) "
        "to the __usage topic for billing; a crash loses at most this long's egress; 0 turns metering off "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--open-segments-max",
        type=_positive_int,
        default=1_000,
        help="log segment files kept open; the least recently used are closed and opened again when read, "
        "written or synced, so idle partitions hold no file (default %(default)s)",
    )
    parser.add_argument(
        "--queue-idle-unload-ms",
        type=int,
        default=300_000,
        help="a queue group's partition that nobody received from or acknowledged on for this long, with nothing "
        "in flight, leaves the broker's memory; its state stays in __consumer_offsets and is read back on the next "
        "receive (default %(default)s)",
    )
    parser.add_argument(
        "--credentials-outage-max-s",
        type=float,
        default=600,
        help="while the controller cannot be reached, a tenant key checked with it at most this long ago still "
        "authenticates (keys never seen get a retriable AUTHENTICATION_UNAVAILABLE); a key revoked meanwhile is "
        "refused about a second after the controller is back (default %(default)s)",
    )
    parser.add_argument(
        "--usage-storage-interval-s",
        type=float,
        default=60,
        help="how often metering samples each partition's size for storage byte-hours (default %(default)s)",
    )
    parser.set_defaults(handler=_run_broker)


def load_cluster_secret_or_exit(path: str | None, role: str) -> bytes:
    """The cluster secret for a server process: $TIDEWAY_CLUSTER_SECRET, ``path``, or $TIDEWAY_HOME/cluster-secret (made once)."""
    import logging

    from brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        ClusterSecretError,
        load_cluster_secret,
        load_or_create_cluster_secret,
    )

    try:
        if path:
            return load_cluster_secret(path)
        default = os.path.join(os.environ.get("TIDEWAY_HOME", "var"), CLUSTER_SECRET_FILE)
        secret, created = load_or_create_cluster_secret(default)
        if created:
            logging.getLogger(__name__).warning(
                "%s: generated this deployment's cluster secret in %s (mode 0600); every broker and controller of "
                "the cluster needs the same one", role, os.path.abspath(default))
        return secret
    except (ClusterSecretError, OSError) as exc:
        raise SystemExit(f"tideway {role}: {exc}") from None


def _run_broker(args: argparse.Namespace) -> int:
    from brokers.server import Broker, BrokerConfig
    from brokers.server.limits import ConnectionLimits

    host, port = args.listen
    if args.internal_listen == "auto":
        internal_host, internal_port = host, (port + 100 if port else 0)
    else:
        internal_host, internal_port = host_port(args.internal_listen)
    if args.metrics_listen == "off":
        metrics_host, metrics_port = None, 0
    elif args.metrics_listen == "auto":
        metrics_host, metrics_port = internal_host, (port + 1000 if port else 0)
    else:
        metrics_host, metrics_port = host_port(args.metrics_listen)
    if bool(args.certfile) != bool(args.keyfile):
        print("tideway broker: --certfile and --keyfile go together", file=sys.stderr)
        return 2
    limits = ConnectionLimits(
        connections_max=args.max_connections,
        unauthenticated_connections_max=args.max_unauthenticated_connections,
        connections_per_principal_max=args.max_connections_per_principal,
        frame_bytes_max=args.max_request_bytes,
        in_flight_per_connection_max=args.max_in_flight_per_connection,
        request_read_timeout_ms=args.request_read_timeout_ms,
    )
    config = BrokerConfig(
        broker_id=args.id,
        data_dir=args.data,
        cluster_secret=load_cluster_secret_or_exit(args.cluster_secret_file, "broker"),
        host=host,
        port=port,
        advertised_host=args.advertise[0] if args.advertise else None,
        advertised_port=args.advertise[1] if args.advertise else None,
        internal_host=internal_host,
        internal_port=internal_port,
        internal_advertised_host=args.internal_advertise[0] if args.internal_advertise else None,
        internal_advertised_port=args.internal_advertise[1] if args.internal_advertise else None,
        metrics_host=metrics_host,
        metrics_port=metrics_port,
        certfile=args.certfile,
        keyfile=args.keyfile,
        cafile=args.cafile,
        client_limits=limits,
        retention_check_interval_ms=args.retention_check_interval_ms,
        controllers=[host_port(a) for a in args.controller.split(",")] if args.controller else None,
        rack=args.rack,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        log_cleaner_interval_ms=args.log_cleaner_interval_ms,
        scrub_bytes_per_s=int(args.scrub_rate * (1 << 20)),
        scrub_pass_interval_s=args.scrub_pass_interval,
        usage_interval_ms=args.usage_interval_ms,
        usage_storage_interval_s=args.usage_storage_interval_s,
        queue_idle_unload_ms=args.queue_idle_unload_ms,
        credentials_outage_max_s=args.credentials_outage_max_s,
        request_buffer_bytes_max=args.request_buffer_mb << 20,
        request_buffer_per_principal_bytes_max=args.request_buffer_per_principal_mb << 20,
        open_segments_max=args.open_segments_max,
    )
    try:
        return run_async(_serve(Broker(config))) or 0
    except errors.StorageError as exc:
        print(f"tideway broker: {exc}", file=sys.stderr)
        return 1


async def _serve(broker) -> int:
    await broker.serve_forever()
    return 0


# -- topics ---------------------------------------------------------------------------------


def _add_topics(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topics", help="create, list, describe and delete topics")
    actions = parser.add_subparsers(dest="action", required=True, metavar="{create,list,describe,add-partitions,delete}")

    create = actions.add_parser("create", help="create a topic", description="Create a topic on the brokers.")
    _bootstrap_argument(create)
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
    _bootstrap_argument(listing)
    listing.set_defaults(handler=lambda a: run_async(_topics_list(a)))

    describe = actions.add_parser("describe", help="show a topic's settings and partitions")
    _bootstrap_argument(describe)
    describe.add_argument("name", nargs="?", help="topic (default: all)")
    describe.set_defaults(handler=lambda a: run_async(_topics_describe(a)))

    grow = actions.add_parser("add-partitions", help="grow a topic to more partitions", description="Raise a topic's partition count. Existing partitions keep their data; keys may map to new partitions from now on.")
    _bootstrap_argument(grow)
    grow.add_argument("name")
    grow.add_argument("--partitions", type=int, required=True, help="the new total number of partitions")
    grow.set_defaults(handler=lambda a: run_async(_topics_add_partitions(a)))

    delete = actions.add_parser("delete", help="delete a topic and its data")
    _bootstrap_argument(delete)
    delete.add_argument("name")
    delete.set_defaults(handler=lambda a: run_async(_topics_delete(a)))


async def _with_client(args: argparse.Namespace, action) -> int:

    try:
        async with _client(args) as client:
            return await action(client) or 0
    except errors.TidewayError as exc:
        print(f"tideway: {exc}", file=sys.stderr)
        return 1


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

    return await _with_client(args, action)


async def _topics_list(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        for name in await client.list_topics():
            print(name)
        return 0

    return await _with_client(args, action)


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

    return await _with_client(args, action)


async def _topics_add_partitions(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        await client.create_partitions(args.name, args.partitions)
        print(f"topic {args.name} now has {args.partitions} partitions")
        return 0

    return await _with_client(args, action)


async def _topics_delete(args: argparse.Namespace) -> int:
    async def action(client) -> int:
        await client.delete_topic(args.name)
        print(f"deleted topic {args.name}")
        return 0

    return await _with_client(args, action)


# -- produce ------------------------------------------------------------------------------------


def _add_produce(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "produce",
        help="send stdin to a topic, one message per line",
        description="Read standard input and send every line (without its newline) as one message. "
        "Prints a summary to stderr; exits 1 if any message was not acknowledged.",
    )
    _bootstrap_argument(parser)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--key", help="key for every message (same key: same partition, in order)")
    parser.add_argument("--partition", type=int, help="send every message to this partition")
    parser.add_argument("--acks", choices=["0", "1", "all"], default="1", help="acknowledgement level (default %(default)s)")
    parser.add_argument("--linger-ms", type=int, default=5, help="wait up to this long to fill a batch (default %(default)s)")
    parser.add_argument("--compression", choices=["none", "gzip", "lz4", "zstd"], default="none")
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
    client = _client(args)
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


def _add_consume(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "consume",
        help="print a topic's messages, one per line",
        description="Print message values, one per line, from every partition of a topic (or --partition).",
    )
    _bootstrap_argument(parser)
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
    client = _client(args)
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
    client = _client(args)
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


def _message_json(message) -> dict:
    import base64

    out = {
        "receipt": message.receipt,
        "partition": message.partition,
        "offset": message.offset,
        "delivery_count": message.delivery_count,
        "lock_deadline_ms": message.lock_deadline_ms,
        "timestamp_ms": message.timestamp_ms,
    }
    for name, data in (("key", message.key), ("value", message.value)):
        if data is None:
            out[name] = None
            continue
        try:
            out[name] = data.decode()
        except UnicodeDecodeError:
            out[f"{name}_base64"] = base64.b64encode(data).decode()
    out["headers"] = {k: (v or b"").decode(errors="replace") for k, v in message.headers}
    return out


def _add_queue(subparsers: argparse._SubParsersAction) -> None:
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
        _bootstrap_argument(sub)
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
    async with _client(args) as client, QueueConsumer(client, args.group, args.topic) as queue:
        try:
            if args.action == "receive":
                messages = await queue.receive(args.max, wait_ms=args.wait_ms, lock_ms=args.lock_ms)
                for message in messages:
                    print(json.dumps(_message_json(message)), flush=True)
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


def _add_dlq(subparsers: argparse._SubParsersAction) -> None:
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
        _bootstrap_argument(sub)
        sub.add_argument("--topic", required=True, help="the queue's topic (its dead-letter topic is TOPIC.dlq unless --dlq-topic)")
        sub.add_argument("--dlq-topic", help="the dead-letter topic, if the queue sets queue.dead.letter.topic")
    parser.set_defaults(handler=lambda a: run_async(_dlq(a)))


async def _dlq(args: argparse.Namespace) -> int:
    import base64

    from tideway.native.queue import list_dead_letters, redrive

    dlq_topic = args.dlq_topic or f"{args.topic}.dlq"
    async with _client(args) as client:
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


def _add_groups(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("groups", help="describe a consumer or queue group: members, positions, lag")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    describe = actions.add_parser("describe", help="print the group's members and per-partition lag as JSON")
    _bootstrap_argument(describe)
    describe.add_argument("--group", required=True)
    describe.add_argument("--type", choices=["stream", "queue"], default="stream",
                          help="with a tenant's key: a stream (consumer) group or a queue group of that name (default %(default)s)")
    parser.set_defaults(handler=lambda a: run_async(_groups(a)))


async def _groups(args: argparse.Namespace) -> int:
    from tideway.native.group import describe_group, group_lag

    async with _client(args) as client:
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
