"""`tideway broker`: run one broker process, with its listeners, limits and storage settings."""

from __future__ import annotations

import argparse
import os
import sys

from tideway_server.brokers.cli.options import (
    host_port,
    non_negative_seconds,
    positive_int,
    run_async,
    server_security_arguments,
)

from tideway.protocol import errors

# -- broker ---------------------------------------------------------------------------


def add_broker(subparsers: argparse._SubParsersAction) -> None:
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
        "--kafka-listen",
        default="off",
        help="HOST:PORT of the Kafka listener: Kafka's wire protocol for unmodified Kafka clients and tools, with SASL/PLAIN "
        "(the API key as password; docs/kafka.md). 'auto' = --listen's host, port + 200; 'off' (the default): none",
    )
    parser.add_argument("--kafka-advertise", type=host_port, help="HOST:PORT Kafka clients should use, if not --kafka-listen")
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
        "--request-buffer-mb", type=positive_int, default=256,
        help="MiB of requests in progress the broker holds at once, from a request's first byte to its answer; "
        "one that would pass it is read past unkept and answered BROKER_BUSY, a retriable error (default %(default)s)")
    parser.add_argument(
        "--request-buffer-per-principal-mb", type=positive_int, default=64,
        help="the share of --request-buffer-mb one API key (or service, or peer) may hold (default %(default)s)")
    parser.add_argument(
        "--request-read-timeout-ms", type=positive_int, default=30_000,
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
        type=non_negative_seconds,
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
        type=positive_int,
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
        "--transactional-id-expiration-ms",
        type=positive_int,
        default=7 * 24 * 3600 * 1000,
        help="a transactional id with no transaction for this long is forgotten by its coordinator (Kafka's "
        "transactional.id.expiration.ms); its next init starts it afresh (default %(default)s: 7 days)",
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

    from tideway_server.brokers.security.keys import (
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
    from tideway_server.brokers.server import Broker, BrokerConfig
    from tideway_server.brokers.server.limits import ConnectionLimits

    host, port = args.listen
    if args.internal_listen == "auto":
        internal_host, internal_port = host, (port + 100 if port else 0)
    else:
        internal_host, internal_port = host_port(args.internal_listen)
    kafka_host, kafka_port = None, 0
    if args.kafka_listen == "auto":
        kafka_host, kafka_port = host, (port + 200 if port else 0)
    elif args.kafka_listen != "off":
        kafka_host, kafka_port = host_port(args.kafka_listen)
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
        kafka_host=kafka_host,
        kafka_port=kafka_port,
        kafka_advertised_host=args.kafka_advertise[0] if args.kafka_advertise else None,
        kafka_advertised_port=args.kafka_advertise[1] if args.kafka_advertise else None,
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
        transactional_id_expiration_ms=args.transactional_id_expiration_ms,
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
