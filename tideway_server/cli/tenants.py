"""``tideway tenant create`` and ``tideway serve``: the control plane from the command line."""

from __future__ import annotations

import argparse
import json
import sys

from tideway_server.brokers.cli import host_port


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    tenant = subparsers.add_parser("tenant", help="manage tenants in the deployment's database")
    actions = tenant.add_subparsers(dest="action", required=True, metavar="{create}")
    create = actions.add_parser(
        "create",
        help="create a tenant and print an API key with every scope",
        description="Create a tenant in the control-plane database (DATABASE_URL, default SQLite under "
        "$TIDEWAY_HOME, as 'tideway up' uses it) and print an API key with the produce, consume and manage "
        "scopes. The key is shown only now: keep it.",
    )
    create.add_argument("name", help="the tenant's name; its id (slug) is derived from it")
    create.add_argument("--plan", default="free", help="plan name: free, team, business or enterprise (default %(default)s)")
    create.add_argument("--region", default="local", help="region its queues are placed in (default %(default)s)")
    create.add_argument("--json", action="store_true", help="print {tenant, plan, api_key} as JSON")
    create.set_defaults(handler=_create_tenant)

    serve = subparsers.add_parser(
        "serve",
        help="serve the REST API and the data gateway (HTTP and WebSocket)",
        description="Run the ASGI server (uvicorn with uvloop) for the control plane and the data gateway: "
        "/api/v1/... (management, publish and consume), WebSockets at /ws/v1/queues/NAME, the "
        "Confluent-compatible schema registry at /api/v1/registry, the OpenAPI schema at /api/schema/ and "
        "browsable docs at /api/docs/. Rate limits and dedup windows live in Redis (TIDEWAY_REDIS_URL). "
        "Migrates the database first unless --no-migrate.",
    )
    serve.add_argument("--listen", type=host_port, default=("127.0.0.1", 8000), help="HOST:PORT (default 127.0.0.1:8000)")
    serve.add_argument("--no-migrate", action="store_true", help="do not migrate the database at start")
    serve.add_argument("--certfile", help="serve HTTPS and WSS with this PEM certificate (chain)")
    serve.add_argument("--keyfile", help="the certificate's PEM private key (with --certfile)")
    serve.set_defaults(handler=_serve)


def _create_tenant(args: argparse.Namespace) -> int:
    import os
    from pathlib import Path

    from tideway_server.cli.django_setup import setup_django

    home = Path(os.environ.get("TIDEWAY_HOME", "var")).resolve()
    if not os.environ.get("DATABASE_URL") and not (home / "tideway.sqlite3").exists():
        # A new database here would hold a tenant no running deployment knows: its key would get 401.
        print(f"error: no deployment at {home} (no database {home / 'tideway.sqlite3'}): start one with 'tideway up', "
              "or point TIDEWAY_HOME (or DATABASE_URL) at the deployment's", file=sys.stderr)
        return 1

    setup_django(migrate=True)
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.tenants.actions import do_create_api_key, do_create_tenant

    try:
        tenant = do_create_tenant(args.name, plan_name=args.plan, region=args.region, acting="cli")
        _, key = do_create_api_key(tenant, name="created by tideway tenant create",
                                   scopes=["produce", "consume", "manage"], acting="cli")
    except ActionError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"tenant": tenant.slug, "plan": tenant.plan.name, "api_key": key}))
    else:
        print(f"tenant  {tenant.slug} (plan {tenant.plan.name}, region {tenant.region})")
        print(f"api key {key}")
        print("The key is shown only now. Use it as 'Authorization: Bearer <key>'.")
    return 0


def _serve(args: argparse.Namespace) -> int:
    from tideway_server.cli.django_setup import setup_django

    setup_django(migrate=not args.no_migrate)
    import uvicorn

    host, port = args.listen
    if bool(args.certfile) != bool(args.keyfile):
        print("error: --certfile and --keyfile go together", file=sys.stderr)
        return 2
    config = uvicorn.Config("tideway_server.controlplane.asgi:application", host=host, port=port, loop="uvloop", lifespan="off",
                            log_level="info", access_log=False, ws="websockets-sansio", ws_ping_interval=20,
                            ws_ping_timeout=20, ssl_certfile=args.certfile, ssl_keyfile=args.keyfile,
                            # No permessage-deflate (as Node's ws server by default): compressing every
                            # small frame cost CPU on both ends for little gain.
                            ws_per_message_deflate=False)
    uvicorn.Server(config).run()
    return 0
