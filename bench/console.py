"""Benchmark the console's list pages for a large tenant: server time per page.

Sets up the control plane's database (SQLite in a temporary TIDEWAY_HOME),
a tenant with ``--queues`` queues (rows, as the control plane keeps them) and
``--events`` audit events, signs a member in with Django's test client (the
whole view, template and database path, no network), and times each list
page ``--rounds`` times: dashboard, queues (first page, a search, a later page,
sorted by age), the HTMX rows partial, the audit log, API keys, members, alerts, schemas, invoices.
Issue 16's target: every list page under 300 ms.

With ``--groups N`` (default 2,000; 0 skips it) it starts a real broker, gives
a 3-partition queue N consumer groups with committed positions, and times
the queue page's group table (the HTMX partial the page refreshes every 2 s:
lag in messages and seconds, rates, sorted by lag, 50 per page), a search in
it, the queue list's figures for that queue (messages stored, rates), and the dashboard's "furthest behind"
partial. Target: under 300 ms.

With ``--messages N`` (default 1,000,000; 0 skips it) it also starts a real
broker, writes N keyed 100-byte messages to a 3-partition queue and times the
message browser's filtered searches (``gateway.operations.browse.find``, the code behind
the page): a key near the end (found within the scan budget) and a key that
does not exist (the scan stops at its budget and says so). Target: the first
page of a filtered search over 1,000,000 messages in under 2 s.

Prints one JSON object on stdout; progress goes to stderr.

    .venv/bin/python bench/console.py              # 1,000 queues, 2,000 audit events
    .venv/bin/python bench/console.py --quick      # 200 queues
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO_ROOT)]

from bench.common import progress  # noqa: E402

PAGES = {
    "dashboard": ("/console/", {}),
    "queues_first_page": ("/console/queues", {}),
    "queues_search": ("/console/queues", {"q": "orders-05"}),
    "queues_page_10": ("/console/queues", {"page": "10"}),
    "queues_newest_first": ("/console/queues", {"sort": "-created"}),
    "queues_rows_partial": ("/console/queues", {"q": "orders"}),
    "audit_log": ("/console/audit", {}),
    "audit_filtered": ("/console/audit", {"action": "queue"}),
    "api_keys": ("/console/keys", {}),
    "members": ("/console/members", {}),
    "alerts": ("/console/alerts", {}),
    "schemas": ("/console/schemas", {}),
    "invoices": ("/console/invoices", {}),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="200 queues and 400 events instead of 1,000 and 2,000")
    parser.add_argument("--rounds", type=int, default=5, help="times each page is fetched (median reported)")
    parser.add_argument("--groups", type=int, default=None,
                        help="consumer groups on one queue for the group-table phase (default 2,000, --quick 200; 0 skips it)")
    parser.add_argument("--messages", type=int, default=None,
                        help="messages for the search phase (default 1,000,000, --quick 100,000; 0 skips it)")
    args = parser.parse_args()
    queues, events = (200, 400) if args.quick else (1_000, 2_000)

    home = tempfile.mkdtemp(prefix="tideway-bench-console-")
    os.environ["TIDEWAY_HOME"] = home
    os.environ.pop("DATABASE_URL", None)
    from tideway_server.cli.django_setup import setup_django

    progress(f"migrating a fresh database in {home}")
    setup_django(migrate=True)
    from django.test import Client
    from tideway_server.clusters.models import Cluster
    from tideway_server.tenants.actions import do_create_api_key, do_signup
    from tideway_server.tenants.models import AuditEntry
    from tideway_server.topics.models import Queue

    user, tenant = do_signup(username="bench", password="a long bench password", email="b@example.com", tenant_name="Bench")
    cluster = Cluster.objects.create(name="local")
    progress(f"creating {queues} queues and {events} audit events")
    Queue.objects.bulk_create([
        Queue(tenant=tenant, cluster=cluster, name=f"orders-{i:05d}", status="ready", broker_topic=f"t{tenant.id}.orders-{i:05d}",
              partitions=3, replication_factor=3, retention_ms=86_400_000, retention_bytes=1 << 20, max_message_bytes=1 << 20)
        for i in range(queues)])
    AuditEntry.objects.bulk_create([
        AuditEntry(tenant=tenant, tenant_slug=tenant.slug, actor="user:bench", action="queue.create", target=f"orders-{i:05d}")
        for i in range(events)])
    for i in range(20):
        do_create_api_key(tenant, name=f"key {i}", scopes=["consume"], acting="bench")

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(user)
    results = {}
    for name, (path, params) in PAGES.items():
        headers = {"HTTP_HX_REQUEST": "true"} if name.endswith("partial") else {}
        timings = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            answer = client.get(path, params, **headers)
            timings.append((time.perf_counter() - started) * 1000)
            assert answer.status_code == 200, (path, answer.status_code)
        results[name] = {"median_ms": round(statistics.median(timings), 1), "max_ms": round(max(timings), 1)}
        progress(f"{name}: {results[name]['median_ms']} ms")
    group_count = args.groups if args.groups is not None else (200 if args.quick else 2_000)
    groups = groups_phase(tenant, cluster, client, group_count, args.rounds) if group_count else None
    messages = args.messages if args.messages is not None else (100_000 if args.quick else 1_000_000)
    search = search_phase(tenant, messages) if messages else None
    print(json.dumps({
        "benchmark": "console",
        "mode": "quick" if args.quick else "full",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "tenant": {"queues": queues, "audit_events": events, "api_keys": 20},
        "what": "server time of each page through Django's test client (view, templates, SQLite), median of "
                f"{args.rounds}",
        "pages": results,
        "slowest_median_ms": max(r["median_ms"] for r in results.values()),
        "target_ms": 300,
        "groups": groups,
        "search": search,
    }, indent=2))
    return 0


def groups_phase(tenant, cluster, client, count: int, rounds: int) -> dict:
    """A real broker; a queue with ``count`` stream groups at spread-out positions; time the group pages."""
    import asyncio

    from tideway_server.topics.models import Queue

    from bench.broker import start_broker
    from bench.common import free_port
    from tideway.native import Producer, TidewayClient
    from tideway.native.group import CoordinatorLink, commit_offsets

    data_dir = tempfile.mkdtemp(prefix="tideway-bench-console-groups-")
    port = free_port()
    broker = start_broker(data_dir, port)
    bootstrap = f"127.0.0.1:{port}"
    topic = f"t{tenant.id}.busy"
    try:
        async def fill() -> None:
            async with TidewayClient(bootstrap) as admin:
                await admin.create_topic(topic, partitions=3)
                async with Producer(admin, acks=1, linger_ms=5) as producer:
                    for i in range(3_000):
                        await producer.send(topic, b"v" * 100, partition=i % 3)
                    await producer.flush()
                sem = asyncio.Semaphore(32)

                async def commit(i: int) -> None:
                    async with sem:
                        link = CoordinatorLink(admin, f"t{tenant.id}.stream.group-{i:05d}")
                        await commit_offsets(link, {(topic, p): (i * 7 + p) % 1_000 for p in range(3)})

                await asyncio.gather(*(commit(i) for i in range(count)))

        progress(f"writing 3,000 messages and committing positions for {count} groups")
        started = time.perf_counter()
        asyncio.run(fill())
        progress(f"done in {time.perf_counter() - started:.1f}s; timing the group pages")
        cluster.bootstrap = bootstrap
        cluster.save(update_fields=["bootstrap"])
        # The list pages' queues have no topics on this broker: the dashboard would look at them first.
        Queue.objects.filter(tenant=tenant, name__startswith="orders-").delete()
        Queue.objects.create(tenant=tenant, cluster=cluster, name="busy", status="ready", broker_topic=topic, mode="stream",
                             partitions=3, replication_factor=1, retention_ms=86_400_000, retention_bytes=1 << 30,
                             max_message_bytes=1 << 20)
        out = {"groups": count, "partitions": 3}
        for name, path, params in (
            ("queue_groups_first_page", "/console/queues/busy/groups", {}),
            ("queue_groups_page_20", "/console/queues/busy/groups", {"page": "20"}),
            ("queue_groups_search", "/console/queues/busy/groups", {"q": "group-0199"}),
            ("queue_list_figures", "/console/queue-figures", {"names": "busy"}),
            ("dashboard_behind", "/console/behind", {}),
        ):
            timings = []
            for _ in range(rounds):
                started = time.perf_counter()
                answer = client.get(path, params, HTTP_HX_REQUEST="true")
                timings.append((time.perf_counter() - started) * 1000)
                assert answer.status_code == 200, (path, answer.status_code)
                assert b"the brokers did not answer" not in answer.content, answer.content[:500]
            out[name] = {"median_ms": round(statistics.median(timings), 1), "max_ms": round(max(timings), 1)}
            progress(f"{name}: {out[name]['median_ms']} ms")
        return out
    finally:
        broker.terminate()
        broker.wait(30)


def search_phase(tenant, count: int) -> dict:
    """A real broker with ``count`` keyed messages; time the browser's filtered searches over them."""
    import asyncio

    from asgiref.sync import async_to_sync
    from tideway_server.controlplane.api.principal import Principal
    from tideway_server.gateway.catalog import QueueInfo
    from tideway_server.gateway.operations import browse
    from tideway_server.tenants.choices import ALL_SCOPES
    from tideway_server.webui.data import caller_for

    from bench.broker import start_broker
    from bench.common import free_port
    from tideway.native import Producer, TidewayClient

    data_dir = tempfile.mkdtemp(prefix="tideway-bench-console-broker-")
    port = free_port()
    broker = start_broker(data_dir, port)
    bootstrap = f"127.0.0.1:{port}"
    topic = f"t{tenant.id}.big"
    try:
        async def fill() -> None:
            async with TidewayClient(bootstrap) as client:
                await client.create_topic(topic, partitions=3)
            value = b"v" * 100
            async with Producer(bootstrap, acks=1, linger_ms=5, batch_size_bytes=512 << 10) as producer:
                for i in range(count):
                    await producer.send(topic, value, key=b"k-%09d" % i)
                await producer.flush()

        progress(f"writing {count} keyed messages to a 3-partition queue")
        started = time.perf_counter()
        asyncio.run(fill())
        progress(f"written in {time.perf_counter() - started:.1f}s; searching")
        queue = QueueInfo(id=1, tenant_id=tenant.id, name="big", mode="stream", broker_topic=topic, dead_letter_topic="",
                          partitions=3, bootstrap=bootstrap, max_message_bytes=1 << 20, visibility_timeout_ms=30_000,
                          schema_subject="", schema_encoding="")
        caller = caller_for(Principal(tenant=tenant, scopes=ALL_SCOPES, actor="user:bench"))
        out = {"messages": count, "scan_budget": browse.SCAN_BUDGET}
        for name, search in (
            ("key_near_the_end", browse.Search(mode="latest", key=f"k-{count - 7:09d}", count=50)),
            ("key_absent", browse.Search(mode="latest", key="no-such-key", count=50)),
            ("latest_50_unfiltered", browse.Search(mode="latest", count=50)),
        ):
            started = time.perf_counter()
            found = async_to_sync(browse.find)(caller, queue, search)
            out[name] = {"ms": round((time.perf_counter() - started) * 1000, 1), "found": len(found.messages),
                         "scanned": found.scanned, "budget_ran_out": found.exhausted}
            progress(f"{name}: {out[name]}")
        return out
    finally:
        broker.terminate()
        broker.wait(30)


if __name__ == "__main__":
    raise SystemExit(main())
