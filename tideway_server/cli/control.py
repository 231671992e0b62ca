"""Commands that run or inspect a whole deployment: controller, up, cluster status."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tideway.protocol import errors
from tideway_server.brokers.cli import (
    cli_credentials,
    cli_tls,
    credential_arguments,
    host_port,
    load_cluster_secret_or_exit,
    run_async,
    server_security_arguments,
)

DEPLOYMENT_FILE = "deployment.json"


def tideway_home() -> Path:
    return Path(os.environ.get("TIDEWAY_HOME", "var")).resolve()


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    controller = subparsers.add_parser(
        "controller",
        help="run a cluster controller (one active per cluster; others stand by)",
        description="Run a controller. It keeps cluster state in the control-plane database (DATABASE_URL, "
        "default SQLite under $TIDEWAY_HOME), takes the cluster's lease when it is free, and while active "
        "fences dead brokers, moves leadership, decides ISR changes and creates topics.",
    )
    controller.add_argument("--listen", type=host_port, default=("127.0.0.1", 9400), help="HOST:PORT brokers reach it on (default 127.0.0.1:9400)")
    controller.add_argument("--cluster", default="local", help="cluster name (default %(default)s)")
    controller.add_argument("--lease-ms", type=int, default=3000, help="lease length; a standby takes over this long after the active one dies (default %(default)s)")
    controller.add_argument("--broker-session-timeout-ms", type=int, default=3000, help="a broker silent this long is fenced (default %(default)s)")
    controller.add_argument("--no-migrate", action="store_true", help="do not migrate the database at start")
    server_security_arguments(controller, peers="the brokers'")
    controller.set_defaults(handler=_run_controller)

    up = subparsers.add_parser(
        "up",
        help="run a whole deployment on this machine (3 brokers, controller, API and gateway, Redis, Celery, demo tenant)",
        description="Start a controller, a 3-broker cluster, the ASGI server (REST API and data gateway, HTTP and "
        "WebSocket), Redis (when TIDEWAY_REDIS_URL answers nothing) and a Celery worker on 127.0.0.1, with all "
        "state under $TIDEWAY_HOME (default var/), and create a tenant 'demo' with a queue 'demo' and an API key "
        "the first time. Prints where everything is; Ctrl-C stops it all cleanly.",
    )
    up.add_argument("--brokers", type=int, default=3, help="number of brokers (default %(default)s)")
    up.add_argument("--controller-port", type=int, default=9400, help="controller port (default %(default)s)")
    up.add_argument("--first-broker-port", type=int, default=9401, help="broker i listens on this + i - 1 (default %(default)s)")
    up.add_argument("--api-port", type=int, default=8000, help="port of the REST API and gateway on 127.0.0.1 (default %(default)s)")
    up.add_argument("--gateways", type=int, default=1,
                    help="number of API and gateway processes (default %(default)s); with 2 or more, HAProxy listens on "
                         "--api-port and spreads requests over them, gateway i listening on --api-port + i")
    up.add_argument("--redis-port", type=int, default=9479,
                    help="port of the Redis started when TIDEWAY_REDIS_URL is unset or unreachable (default %(default)s)")
    up.set_defaults(handler=_run_up)

    cluster = subparsers.add_parser("cluster", help="inspect a cluster")
    actions = cluster.add_subparsers(dest="action", required=True, metavar="{status,metrics-token}")
    status = actions.add_parser(
        "status",
        help="brokers (alive or fenced) and every partition's leader, replicas, ISR, HW and LEO",
        description="Find the controller through $TIDEWAY_HOME/deployment.json (written by 'tideway up') or --controller.",
    )
    status.add_argument("--controller", help="controller addresses HOST:PORT[,...] (default: from $TIDEWAY_HOME)")
    status.add_argument("--bootstrap", help="or: a broker HOST:PORT[,...]; its metadata names the controller")
    credential_arguments(status)
    status.set_defaults(handler=lambda a: run_async(_cluster_status(a)))
    token = actions.add_parser(
        "metrics-token",
        help="print the service key Prometheus sends to brokers' /metrics (Authorization: Bearer)",
        description="The key is derived from the cluster secret ($TIDEWAY_CLUSTER_SECRET, else --cluster-secret-file, "
        "else $TIDEWAY_HOME/cluster-secret): it changes when the secret is rotated. Without it a scrape gets only "
        "the families that name no tenant. On Kubernetes: kubectl create secret generic CLUSTER-metrics-token "
        "--from-literal=token=\"$(tideway cluster metrics-token)\", mounted as Prometheus's credentials_file.",
    )
    token.add_argument("--cluster-secret-file", help="file holding the cluster secret (hex)")
    token.set_defaults(handler=_print_metrics_token)


# -- controller --------------------------------------------------------------------------------


def _run_controller(args: argparse.Namespace) -> int:
    from tideway_server.cli.django_setup import setup_django

    setup_django(migrate=not args.no_migrate)
    from tideway_server.clusters.controller.service import Controller, ControllerConfig

    host, port = args.listen
    if bool(args.certfile) != bool(args.keyfile):
        print("tideway controller: --certfile and --keyfile go together", file=sys.stderr)
        return 2
    config = ControllerConfig(
        cluster_secret=load_cluster_secret_or_exit(args.cluster_secret_file, "controller"),
        certfile=args.certfile,
        keyfile=args.keyfile,
        cafile=args.cafile,
        cluster=args.cluster,
        host=host,
        port=port,
        lease_ms=args.lease_ms,
        broker_session_timeout_ms=args.broker_session_timeout_ms,
    )

    async def serve() -> int:
        controller = Controller(config)
        await controller.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        await stop.wait()
        await controller.stop()
        return 0

    return run_async(serve())


# -- up ------------------------------------------------------------------------------------------


def _run_up(args: argparse.Namespace) -> int:
    from tideway_server.cli.django_setup import setup_django

    if not 1 <= args.gateways <= 32:
        raise SystemExit(f"tideway up: --gateways is 1 to 32, not {args.gateways}")

    home = tideway_home()
    home.mkdir(parents=True, exist_ok=True)
    os.environ["TIDEWAY_HOME"] = str(home)  # every process of the deployment finds its secrets there
    secrets = _deployment_secrets(home)
    setup_django(migrate=True)  # once, before any controller starts
    from tideway_server.clusters.provisioning import ClusterSpec, LocalProvisioner

    provisioner = LocalProvisioner(home=home)
    spec = ClusterSpec(name="local", brokers=args.brokers, controller_port=args.controller_port,
                       first_broker_port=args.first_broker_port)
    logs = home / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    redis_process = _redis_for(home, logs, args.redis_port)
    processes = provisioner.start(spec)
    if redis_process is not None:
        processes.insert(0, ("redis", redis_process))  # stopped last
    api_address = f"127.0.0.1:{args.api_port}"
    gateways = [api_address] if args.gateways == 1 else [f"127.0.0.1:{args.api_port + i}" for i in range(1, args.gateways + 1)]
    serving = [(f"api-{i}" if len(gateways) > 1 else "api", ["tideway_server.cli.main", "serve", "--listen", address, "--no-migrate"])
               for i, address in enumerate(gateways, start=1)]
    for name, command in (*serving,
                          ("worker", ["celery", "-A", "tideway_server.controlplane", "worker", "-c", "1", "--without-mingle", "--without-gossip"]),
                          # Lag looks and alert rules, every few seconds: never behind a redrive or a Spark job.
                          ("monitoring", ["celery", "-A", "tideway_server.controlplane", "worker", "-Q", "monitoring", "-c", "1",
                                          "-n", "monitoring@%h", "--without-mingle", "--without-gossip"]),
                          # Usage and invoices (Spark jobs) on their own queue, with the beat that schedules them.
                          ("billing", ["celery", "-A", "tideway_server.controlplane", "worker", "-Q", "billing", "-c", "1", "-B",
                                       "-s", str(home / "celerybeat-schedule"), "-n", "billing@%h",
                                       "--without-mingle", "--without-gossip"])):
        log_file = open(logs / f"{name}.log", "ab")  # noqa: SIM115 - the child owns it
        processes.append((name, subprocess.Popen([sys.executable, "-m", *command], stdout=log_file, stderr=subprocess.STDOUT,
                                                 start_new_session=True)))
    from tideway_server.cli.supervisor import Supervisor

    if len(gateways) > 1:
        from tideway_server.cli.balancer import start_haproxy

        with open(logs / "balancer.log", "ab") as log_file:
            try:
                processes.append(("balancer", start_haproxy(home / "haproxy.cfg", api_address, gateways, log_file=log_file)))
            except SystemExit:
                Supervisor(processes, logs).stop()
                raise
    supervisor = Supervisor(processes, logs)  # a process that exits is restarted; the others keep serving
    controller_address = provisioner.controller_address(spec)
    brokers = [
        {"id": i, "address": provisioner.broker_address(spec, i),
         "internal": f"127.0.0.1:{spec.first_broker_port + i - 1 + 100}",
         "kafka": provisioner.kafka_address(spec, i),
         "metrics": f"http://127.0.0.1:{spec.first_broker_port + i - 1 + 1000}/metrics"}
        for i in range(1, spec.brokers + 1)
    ]
    deployment = {"controller": controller_address, "brokers": brokers, "bootstrap": provisioner.bootstrap(spec),
                  "kafka_bootstrap": provisioner.kafka_bootstrap(spec),
                  "api": f"http://{api_address}", "gateways": [f"http://{g}" for g in gateways], "pid": os.getpid()}
    (home / DEPLOYMENT_FILE).write_text(json.dumps(deployment, indent=2))
    try:
        demo_key = _demo_tenant(home, spec.brokers)
    except BaseException:
        supervisor.stop()
        raise
    print(f"Tideway is up (state in {home}, logs in {logs}):")
    print(f"  API         http://{api_address}/api/v1/   (docs http://{api_address}/api/docs/)")
    if len(gateways) > 1:
        print(f"  gateways    {', '.join(gateways)}   behind HAProxy on {api_address} ({home / 'haproxy.cfg'}, "
              f"log {logs / 'balancer.log'})")
    print(f"  controller  {controller_address}")
    for broker in brokers:
        print(f"  broker {broker['id']}    {broker['address']}   internal {broker['internal']}   kafka {broker['kafka']}   "
              f"metrics {broker['metrics']}")
    print(f"  bootstrap   {deployment['bootstrap']}   (Kafka clients: {deployment['kafka_bootstrap']}, SASL/PLAIN with an "
          "API key as the password)")
    print(f"  WebSocket   ws://{api_address}/ws/v1/queues/NAME")
    print(f"  SQS         http://{api_address}/sqs   (AWS SDKs; credentials: POST /api/v1/keys/PREFIX/aws-credentials, "
          "docs/sqs.md)")
    print(f"  Redis       {os.environ['TIDEWAY_REDIS_URL']}   Celery worker log {logs / 'worker.log'}")
    print(f"  billing     usage and invoices every {os.environ.get('TIDEWAY_USAGE_REFRESH_S', '240')} s (Spark), "
          f"log {logs / 'billing.log'}")
    print(f"  secrets     {', '.join(str(p) for p in secrets)} (mode 0600; made once for this deployment)")
    if demo_key:
        print(f"  demo tenant 'demo' with queue 'demo', API key {demo_key}  (also in {home / 'demo-api-key'})")
    if (home / "demo-password").exists():
        print(f"  console     http://{api_address}/console/   user '{DEMO_USER}', password in {home / 'demo-password'}")
    print(f"Try: curl -H 'Authorization: Bearer KEY' -d '{{\"messages\": [{{\"value\": \"hello\"}}]}}' "
          f"http://{api_address}/api/v1/queues/demo/messages")
    print("A process that exits is restarted; Ctrl-C stops everything.", flush=True)
    stop = False

    def request_stop(signum, frame) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    while not stop:
        supervisor.poll()
        time.sleep(0.2)
    print("stopping ...", flush=True)
    supervisor.stop()
    (home / DEPLOYMENT_FILE).unlink(missing_ok=True)
    print("stopped")
    return 0


def _deployment_secrets(home: Path) -> list[Path]:
    """The deployment's cluster secret and token-signing key under ``home`` (0600), generated the first time."""
    from tideway_server.brokers.security.keys import (
        CLUSTER_SECRET_BYTES,
        CLUSTER_SECRET_FILE,
        create_secret_file,
    )

    paths = [home / CLUSTER_SECRET_FILE, home / "signing-key"]
    for path in paths:
        if create_secret_file(path, CLUSTER_SECRET_BYTES):
            print(f"tideway up: generated {path}", file=sys.stderr)
        mode = path.stat().st_mode & 0o777
        if mode & 0o077:
            raise SystemExit(f"tideway up: {path} is readable by others (mode {mode:o}): chmod 600 it")
    paths.append(_metrics_token(home))
    return paths


def _print_metrics_token(args: argparse.Namespace) -> int:
    from tideway_server.brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        ClusterSecretError,
        load_cluster_secret,
        service_key,
    )

    try:
        secret = load_cluster_secret(args.cluster_secret_file or tideway_home() / CLUSTER_SECRET_FILE)
    except ClusterSecretError as exc:
        print(f"tideway cluster metrics-token: {exc}", file=sys.stderr)
        return 2
    print(service_key(secret, "metrics"))
    return 0


def _metrics_token(home: Path) -> Path:
    """A service key for Prometheus (``authorization: credentials_file``) in home/metrics-token (0600): brokers give
    tenants' per-topic metrics only to a bearer of one (brokers/server/metrics.py)."""
    from tideway_server.brokers.security.keys import (
        CLUSTER_SECRET_FILE,
        load_cluster_secret,
        service_key,
    )

    path = home / "metrics-token"
    token = service_key(load_cluster_secret(home / CLUSTER_SECRET_FILE), "metrics")
    if not path.exists() or path.read_text().strip() != token:  # the secret may have been rotated
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token + "\n")
    return path


def _demo_tenant(home: Path, brokers: int) -> str:
    """The demo tenant's API key: the tenant, its queue 'demo' and the key (kept in home/demo-api-key) made the first time."""
    from tideway_server.clusters.choices import BrokerState
    from tideway_server.clusters.models import Broker
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.tenants.actions import do_create_api_key, do_create_tenant
    from tideway_server.tenants.models import Tenant
    from tideway_server.topics.actions import do_create_queue

    saved = home / "demo-api-key"
    existing = Tenant.objects.filter(slug="demo").first()
    if existing is not None:
        _demo_member(home, existing)
        return saved.read_text().strip() if saved.exists() else ""
    tenant = do_create_tenant("demo", plan_name="team", acting="tideway up")
    _demo_member(home, tenant)
    deadline = time.monotonic() + 60
    while Broker.objects.filter(state=BrokerState.ALIVE).count() < brokers and time.monotonic() < deadline:
        time.sleep(0.2)  # the brokers are still registering with the controller
    while True:
        try:
            do_create_queue(tenant, {"name": "demo", "partitions": 3, "replication_factor": 3}, acting="tideway up")
            break
        except (ActionError, errors.TidewayError) as exc:
            if time.monotonic() > deadline:
                raise SystemExit(f"tideway: could not create the demo queue: {exc}") from None
            time.sleep(0.5)
    _, key = do_create_api_key(tenant, name="demo key (tideway up)", scopes=["produce", "consume", "manage"], acting="tideway up")
    saved.write_text(key + "\n")
    saved.chmod(0o600)
    return key


DEMO_USER = "demo"


def _demo_member(home: Path, tenant) -> None:
    """The demo tenant's console sign-in: user 'demo' (owner), its password made once and kept in home/demo-password."""
    import secrets

    from django.contrib.auth import get_user_model

    from tideway_server.tenants.actions import do_add_member

    saved = home / "demo-password"
    if get_user_model().objects.filter(username=DEMO_USER).exists():
        return
    password = secrets.token_urlsafe(12)
    do_add_member(tenant, username=DEMO_USER, role="owner", password=password, acting="tideway up")
    saved.write_text(password + "\n")
    saved.chmod(0o600)


def _redis_for(home: Path, logs: Path, port: int) -> subprocess.Popen | None:
    """Use TIDEWAY_REDIS_URL when it answers; else start redis-server on 127.0.0.1:port (and return it)."""
    import redis

    url = os.environ.get("TIDEWAY_REDIS_URL") or f"redis://127.0.0.1:{port}/0"
    os.environ["TIDEWAY_REDIS_URL"] = url  # the API server and the worker inherit it
    try:
        redis.Redis.from_url(url, socket_connect_timeout=1).ping()
        return None
    except redis.RedisError:
        pass
    if url != f"redis://127.0.0.1:{port}/0":
        raise SystemExit(f"tideway: Redis at TIDEWAY_REDIS_URL={url} does not answer")
    (home / "redis").mkdir(exist_ok=True)
    process = subprocess.Popen(["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no",
                                "--dir", str(home / "redis"), "--logfile", str(logs / "redis.log")], start_new_session=True)
    deadline = time.monotonic() + 20
    while True:
        try:
            redis.Redis.from_url(url, socket_connect_timeout=1).ping()
            return process
        except redis.RedisError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"tideway: redis-server did not start on port {port}; see {logs / 'redis.log'}") from None
            time.sleep(0.1)


# -- cluster status --------------------------------------------------------------------------------


async def _controller_addresses(args: argparse.Namespace) -> list[tuple[str, int]]:
    if args.controller:
        return [host_port(a) for a in args.controller.split(",")]
    if args.bootstrap:
        from tideway.native import TidewayClient
        from tideway.protocol import messages as m
        from tideway.protocol.messages import ApiKey

        async with TidewayClient(args.bootstrap, credentials=cli_credentials(args), ssl_context=cli_tls(args)) as client:
            metadata = await client.request_any(ApiKey.METADATA, m.MetadataRequest(topics=[]))
        if not metadata.controller_address:
            raise SystemExit("tideway: that broker runs standalone (no controller); use 'tideway topics describe'")
        return [host_port(metadata.controller_address)]
    path = tideway_home() / DEPLOYMENT_FILE
    if not path.exists():
        raise SystemExit(f"tideway: no deployment found at {path}; start one with 'tideway up' or pass --controller")
    return [host_port(json.loads(path.read_text())["controller"])]


async def _cluster_status(args: argparse.Namespace) -> int:
    from tideway.native import TidewayClient
    from tideway.native.conn import connect
    from tideway.protocol import messages as m
    from tideway.protocol.messages import ApiKey

    response = None
    last_error: Exception | None = None
    for host, port in await _controller_addresses(args):
        try:
            connection = await connect(host, port, timeout_s=3, credentials=cli_credentials(args), ssl_context=cli_tls(args))
            try:
                response = await connection.request(ApiKey.DESCRIBE_CLUSTER, m.DescribeClusterRequest())
                break
            finally:
                connection.close()
        except errors.TidewayError as exc:
            last_error = exc
    if response is None:
        print(f"tideway: no active controller answered: {last_error}", file=sys.stderr)
        return 1
    print(f"controller epoch {response.controller_epoch} ({response.controller_id})")
    print("brokers:")
    for broker in response.brokers:
        rack = f" rack {broker.rack}" if broker.rack else ""
        print(f"  {broker.node_id}  {broker.host}:{broker.port}  {broker.state}{rack}")
    # HW and LEO as each partition's leader sees them (a follower's HW lags).
    offsets: dict[tuple[str, int], tuple[int, int]] = {}
    leaders = {(s.topic, s.partition): s.leader for s in response.partitions}
    for broker in response.brokers:
        if broker.state != "alive":
            continue
        try:
            async with TidewayClient(f"{broker.host}:{broker.port}", credentials=cli_credentials(args),
                                     ssl_context=cli_tls(args)) as client:
                for topic in await client.describe_topics():
                    for p in topic.partitions:
                        if leaders.get((topic.name, p.partition)) == broker.node_id:
                            offsets[(topic.name, p.partition)] = (p.high_watermark, p.log_end_offset)
        except errors.TidewayError:
            continue
    print("partitions:")
    for state in sorted(response.partitions, key=lambda s: (s.topic, s.partition)):
        hw, leo = offsets.get((state.topic, state.partition), (-1, -1))
        leader = state.leader if state.leader >= 0 else "none (offline)"
        print(
            f"  {state.topic}-{state.partition}  leader {leader}  epoch {state.leader_epoch}  replicas {state.replicas}  "
            f"isr {state.isr}  hw {hw if hw >= 0 else '?'}  leo {leo if leo >= 0 else '?'}"
        )
    return 0
