"""The usage_billing job end to end: a real broker meters a tenant's traffic to __usage; the job (Spark,
local mode) reads it through the tideway source and writes rollups equal to the known counts; a rerun
gives identical rows (same digest); duplicated usage records change nothing."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from tideway_server.brokers.usage_topic import USAGE_TOPIC

from tests.harness.waiting import eventually
from tests.usage_records import read_usage, totals
from tideway.native import Consumer, Producer, TidewayClient
from tideway.native.traffic import describe_traffic
from tideway.protocol import errors

pytestmark = [pytest.mark.django_db(transaction=True, serialized_rollback=True), pytest.mark.timeout(300)]


def test_the_job_rolls_up_exactly_what_was_metered_and_a_rerun_changes_nothing(broker_factory, spark, capsys, client,
                                                                               settings, tmp_path):
    settings.TIDEWAY_HOME = tmp_path  # the Parquet export goes under it
    from django.core.management import call_command
    from tideway_server.billing.models import UsageRollup, UsageRun

    from tests.harness.console import signup

    broker = broker_factory(extra_args=["--usage-storage-interval-s", "1"])
    _user, tenant = signup("ursula")
    topic = f"t{tenant.id}.orders"
    sizes = [20 + i for i in range(40)]

    async def traffic() -> list:
        async with TidewayClient(broker.bootstrap) as client:
            await client.create_topic(topic, partitions=2)
            async with Producer(client, acks="all") as producer:
                for i, size in enumerate(sizes):
                    await producer.send(topic, b"o" * size, partition=i % 2)
            consumer = Consumer(client, auto_offset_reset="earliest")
            await consumer.start()
            await consumer.assign([(topic, 0), (topic, 1)], start="earliest")
            seen = 0
            while seen < len(sizes):
                seen += sum(len(r) for r in (await consumer.getmany(timeout_ms=2000)).values())
            await consumer.stop()
            counters = (await describe_traffic(client, [topic])).topics[topic]
            async def all_reads_metered() -> bool:
                return totals(await read_usage(client), topic)["messages_out"] >= len(sizes)

            await eventually(all_reads_metered, 20, "the broker's usage flush counting every read", interval_s=0.5)
            return counters

    counters = asyncio.run(traffic())
    period = datetime.now(UTC).strftime("%Y-%m")

    def run(*extra: str) -> dict:
        call_command("spark_job", "usage_billing", "--period", period, "--master", "local[2]", "--bootstrap", broker.bootstrap,
                     *extra)
        return json.loads(capsys.readouterr().out.strip().splitlines()[-1])

    def figures(granularity: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for row in UsageRollup.objects.filter(tenant=tenant, granularity=granularity, queue="orders"):
            out[row.metric] = out.get(row.metric, 0) + row.value
        return out

    first = run()
    hours = figures("hour")
    assert hours["messages_in"] == len(sizes) and hours["messages_out"] == len(sizes)
    assert hours["bytes_in"] == counters[1] and hours["bytes_out"] == counters[3]
    assert hours["partition_seconds"] > 0 and hours["storage_byte_seconds"] > 0
    assert figures("day") == hours
    from tideway_server.tenants.actions import do_create_api_key

    key = do_create_api_key(tenant, name="usage", scopes=["consume"], acting="test")[1]
    shown = client.get("/api/v1/usage", {"group_by": "queue"}, HTTP_AUTHORIZATION=f"Bearer {key}").json()
    assert shown["totals"]["messages_in"] == len(sizes) and shown["totals"]["bytes_out"] == counters[3]  # the API's view
    import pyarrow.parquet as pq

    exported = pq.read_table(f"{first['parquet']}/hourly.parquet").to_pylist()
    assert sum(r["value"] for r in exported if r["tenant_id"] == tenant.id and r["metric"] == "messages_in") == len(sizes)
    rows = sorted(UsageRollup.objects.filter(period=period).values_list("tenant_id", "granularity", "start", "queue", "metric", "value"))
    again = run("--same-as", str(first["run"]))  # the same offsets read again: the same rows
    assert again["digest"] == first["digest"] and again["rows"] == first["rows"]
    assert sorted(UsageRollup.objects.filter(period=period).values_list(
        "tenant_id", "granularity", "start", "queue", "metric", "value")) == rows  # replaced, not added to

    # Every usage record sent again: duplicates by id change nothing a tenant pays for.
    async def replay() -> None:
        async with TidewayClient(broker.bootstrap) as client:
            records = await read_usage(client)
            async with Producer(client, acks="all") as producer:
                for record in records:
                    await producer.send(USAGE_TOPIC, json.dumps(record).encode(), key=b"replay")

    asyncio.run(replay())
    later = run()
    assert later["records"] >= first["records"]  # (later flushes add storage samples, and no more)
    hours_again = figures("hour")
    for metric in ("messages_in", "bytes_in", "messages_out", "bytes_out"):
        assert hours_again[metric] == hours[metric], metric
    assert UsageRun.objects.filter(period=period, finished__isnull=False).count() == 3


def test_closing_last_month_finalises_every_tenants_invoice_once(spark, settings, tmp_path):
    settings.TIDEWAY_HOME = tmp_path
    from tideway_server.billing.models import Invoice
    from tideway_server.billing.tasks import close_last_month

    from tests.harness.console import signup

    _user, tenant = signup("olga")
    first = close_last_month()
    invoice = Invoice.objects.get(tenant=tenant)
    assert invoice.status == Invoice.FINAL and invoice.period == first["period"] and first["finalised"] >= 1
    again = close_last_month()
    assert again["finalised"] == 0 and Invoice.objects.get(tenant=tenant).finalized_at == invoice.finalized_at


def test_usage_reported_after_its_invoice_was_final_becomes_a_correction_on_the_next(broker_factory, spark, capsys,
                                                                                      settings, tmp_path):
    """Through the job: last month is billed and finalised; then a record of last month arrives late (and an old
    one is replayed). The final invoice does not change; this month's invoice carries a correction naming last
    month, priced as the difference, once."""
    settings.TIDEWAY_HOME = tmp_path
    from django.core.management import call_command
    from tideway_server.billing.models import Invoice, InvoiceLine
    from tideway_server.billing.pricing import finalise_invoice
    from tideway_server.billing.usage_job import period_bounds

    from tests.harness.console import signup

    broker = broker_factory()
    _user, tenant = signup("lena")  # free plan: 1 GiB in free, then 9 cents a GiB (price book v1)
    now = datetime.now(UTC)
    this_month = now.strftime("%Y-%m")
    last_month = (now.replace(day=1) - timedelta(days=1)).strftime("%Y-%m")
    at = period_bounds(last_month)[0] + 86_400_000  # the 2nd of last month
    gib = 1 << 30
    topic = f"t{tenant.id}.orders"
    on_time = {"id": "broker-1:1:1", "source": "broker-1", "at_ms": at, "egress": [], "requests": [], "storage": [],
               "ingress": [[topic, 0, 0, 100, 100, 3 * gib]]}
    late = {**on_time, "id": "broker-2:5:1", "source": "broker-2", "at_ms": at + 3_600_000,
            "ingress": [[topic, 0, 100, 150, 50, 2 * gib]]}

    async def send(*records: dict) -> None:
        async with TidewayClient(broker.bootstrap) as client:
            try:
                await client.create_topic(USAGE_TOPIC, partitions=4)
            except errors.TopicAlreadyExistsError:
                pass
            async with Producer(client, acks="all") as producer:
                for record in records:
                    await (await producer.send(USAGE_TOPIC, json.dumps(record).encode(), key=record["source"].encode()))

    def job(period: str) -> None:
        call_command("spark_job", "usage_billing", "--period", period, "--master", "local[2]", "--bootstrap",
                     broker.bootstrap, "--invoices")
        capsys.readouterr()

    def lines(invoice) -> list[tuple]:
        return sorted(InvoiceLine.objects.filter(invoice=invoice).values_list(
            "kind", "metric", "usage_period", "quantity", "amount_cents"))

    asyncio.run(send(on_time))
    job(last_month)
    final = finalise_invoice(tenant, last_month)
    billed = lines(final)
    assert ("usage", "bytes_in", last_month, 3 * gib, 2 * 9) in billed  # 3 GiB, the first one free

    asyncio.run(send(late, on_time))  # late usage, and the on-time record replayed
    job(last_month)
    job(this_month)
    final.refresh_from_db()
    assert final.status == Invoice.FINAL and lines(final) == billed  # a final invoice never changes
    current = Invoice.objects.get(tenant=tenant, period=this_month)
    corrections = [line for line in lines(current) if line[0] == "correction"]
    assert corrections == [("correction", "bytes_in", last_month, 2 * gib, 4 * 9 - 2 * 9)]  # the replay adds nothing

    job(this_month)  # recomputed: still one correction, not another
    assert [line for line in lines(current) if line[0] == "correction"] == corrections


def test_a_run_reads_usage_written_from_a_day_before_its_period_on(broker_factory, spark, capsys, settings, tmp_path):
    """__usage keeps 400 days; a run of one month reads one month and a day of it (its manifest says where it
    started), so runs do not grow with the topic's history."""
    settings.TIDEWAY_HOME = tmp_path
    from django.core.management import call_command
    from tideway_server.billing.models import UsageRollup, UsageRun
    from tideway_server.billing.usage_job import LOOKBACK_MS, period_bounds

    from tests.harness.console import signup

    broker = broker_factory()
    _user, tenant = signup("maud")
    period = datetime.now(UTC).strftime("%Y-%m")
    start_ms = period_bounds(period)[0]
    topic = f"t{tenant.id}.orders"

    def record(id_: str, at_ms: int, start: int, end: int) -> dict:
        return {"id": id_, "source": "broker-1", "at_ms": at_ms, "egress": [], "requests": [], "storage": [],
                "ingress": [[topic, 0, start, end, end - start, 100 * (end - start)]]}

    async def send() -> None:
        async with TidewayClient(broker.bootstrap) as client:
            await client.create_topic(USAGE_TOPIC, partitions=4)
            async with Producer(client, acks="all") as producer:
                written_at = start_ms - LOOKBACK_MS - 10 * 86_400_000  # long before: not read
                await producer.send(USAGE_TOPIC, json.dumps(record("broker-1:1:1", written_at, 0, 5)).encode(),
                                    key=b"broker-1", partition=0, timestamp_ms=written_at)
                written_at = start_ms - LOOKBACK_MS // 2  # within the day before: read (its figures are last month's)
                await producer.send(USAGE_TOPIC, json.dumps(record("broker-1:1:2", written_at, 5, 8)).encode(),
                                    key=b"broker-1", partition=0, timestamp_ms=written_at)
                now = int(time.time() * 1000)
                await (await producer.send(USAGE_TOPIC, json.dumps(record("broker-1:1:3", now, 8, 15)).encode(),
                                           key=b"broker-1", partition=0))

    asyncio.run(send())
    call_command("spark_job", "usage_billing", "--period", period, "--master", "local[2]", "--bootstrap", broker.bootstrap)
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert UsageRun.objects.get(pk=summary["run"]).manifest["given"]["0"] == [1, 3]
    assert summary["records"] == 2
    assert sum(UsageRollup.objects.filter(tenant=tenant, granularity="hour", metric="messages_in")
               .values_list("value", flat=True)) == 7
