"""The ``usage_billing`` job: ``__usage`` of every cluster -> hourly and daily rollups in the database.

Reads an exact offset manifest (each ``__usage`` partition from the first record written a day before the
period starts to its end when the run starts, recorded with the run: a run reads one month and a day of
records, however long ``__usage`` keeps them), applies the reading rules (spark_analytics.usage), keeps the
figures reported in the period, and replaces the period's rollups in one transaction; the digest of
the rows lets two runs be compared. Pricing and invoices build on these rows.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import json
import logging
from datetime import UTC, datetime

log = logging.getLogger(__name__)


def period_bounds(period: str) -> tuple[int, int]:
    """[start, end) of a month "YYYY-MM" in ms since the epoch (UTC)."""
    try:
        year, month = (int(part) for part in period.split("-"))
        start = datetime(year, month, 1, tzinfo=UTC)
    except ValueError:
        raise ValueError(f"a period is a month, YYYY-MM: not {period!r}") from None
    days = calendar.monthrange(year, month)[1]
    end_ms = int(start.timestamp() * 1000) + days * 86_400_000
    return int(start.timestamp() * 1000), end_ms


# How long before a period's start its records may have been written: the containment rule needs the ranges a
# re-metered range contains (seconds to minutes older), and clocks may be off. Older records are not read.
LOOKBACK_MS = 86_400_000


async def _manifest(bootstrap: str, key: str | None, since_ms: int) -> dict[str, list[int]]:
    """Per ``__usage`` partition, [first record written at or after ``since_ms``, end): what a run reads."""
    from tideway_server.brokers.usage_topic import USAGE_TOPIC

    from tideway.native import TidewayClient
    from tideway.native.credentials import ApiKey
    from tideway.protocol import errors
    from tideway.protocol import messages as m

    async with TidewayClient(bootstrap, credentials=ApiKey(key) if key else None) as client:
        try:
            infos = await client.partitions_for(USAGE_TOPIC)
        except errors.UnknownTopicOrPartitionError:
            return {}
        out = {}
        for info in infos:
            end, _ = await client.list_offset(USAGE_TOPIC, info.partition, m.LATEST_TIMESTAMP)
            first, _ = await client.list_offset(USAGE_TOPIC, info.partition, since_ms)
            if first < 0:  # nothing written since then
                first = end
            out[str(info.partition)] = [first, end]
        return out


def run_usage_billing(period: str, *, master: str = "local[*]", bootstrap: str | None = None, same_as: int | None = None,
                      progress=print) -> dict:
    """Run the job for ``period``; ``same_as``: read exactly the offsets an earlier run read (its rows come out the
    same, which the digests show)."""
    from django.db import transaction
    from tideway_server.billing.models import UsageRollup, UsageRun
    from tideway_server.brokers.usage_topic import USAGE_TOPIC
    from tideway_server.clusters.admin import bootstrap_of, broker_credentials
    from tideway_server.clusters.models import Cluster
    from tideway_server.spark_analytics.session import spark_session
    from tideway_server.spark_analytics.usage import MALFORMED, usage_rollup
    from tideway_server.tenants.models import Tenant

    from_ms, to_ms = period_bounds(period)
    key = None if bootstrap else broker_credentials().key
    sources = {"given": bootstrap} if bootstrap else {c.name: bootstrap_of(c) for c in Cluster.objects.all()}
    if same_as is not None:
        earlier = UsageRun.objects.filter(pk=same_as, period=period).first()
        if earlier is None:
            raise ValueError(f"there is no run {same_as} of period {period}")
        manifest = earlier.manifest
        sources = {name: address for name, address in sources.items() if name in manifest}
    else:
        manifest = {name: asyncio.run(_manifest(address, key, from_ms - LOOKBACK_MS)) for name, address in sources.items()}
    run = UsageRun.objects.create(period=period)
    progress(f"usage_billing {period}: reading __usage of {len(sources)} cluster(s): {json.dumps(manifest)}")
    spark = spark_session(master, app=f"usage_billing {period}")
    figures: dict[tuple, int] = {}
    records = malformed = 0
    for name, address in sources.items():
        ranges = {p: bounds for p, bounds in manifest[name].items() if bounds[1] > bounds[0]}
        if not ranges:
            continue
        records += sum(end - start for start, end in ranges.values())
        reader = (spark.read.format("tideway").option("bootstrap", address).option("subscribe", USAGE_TOPIC)
                  .option("startingOffsets", json.dumps({USAGE_TOPIC: {p: b[0] for p, b in ranges.items()}}))
                  .option("endingOffsets", json.dumps({USAGE_TOPIC: {p: b[1] for p, b in ranges.items()}}))
                  # every core busy even when one partition holds most of the month
                  .option("minPartitions", str(2 * spark.sparkContext.defaultParallelism)))
        if key:
            reader = reader.option("apiKey", key)
        for row in usage_rollup(reader.load(), from_ms, to_ms).collect():
            if row.metric == MALFORMED:
                malformed += row.value
                continue
            slot = (row.tenant_id, row.queue, row.metric, row.hour_ms)
            figures[slot] = figures.get(slot, 0) + row.value
    if malformed:
        log.warning("usage_billing %s: %d usage records could not be decoded and were skipped", period, malformed)
        progress(f"usage_billing {period}: {malformed} usage records could not be decoded and were skipped")
    known = set(Tenant.objects.filter(pk__in={slot[0] for slot in figures}).values_list("pk", flat=True))
    hours = sorted((t, q, metric, h, v) for (t, q, metric, h), v in figures.items() if t in known)
    days: dict[tuple, int] = {}
    for t, q, metric, h, v in hours:
        slot = (t, q, metric, h // 86_400_000 * 86_400_000)
        days[slot] = days.get(slot, 0) + v
    lines = [("hour", *row) for row in hours] + [("day", t, q, metric, d, v) for (t, q, metric, d), v in sorted(days.items())]
    digest = hashlib.sha256("\n".join(",".join(str(x) for x in line) for line in lines).encode()).hexdigest()

    def stamp(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    with transaction.atomic():
        UsageRollup.objects.filter(period=period).delete()
        UsageRollup.objects.bulk_create([
            UsageRollup(tenant_id=t, period=period, granularity=granularity, start=stamp(start), queue=q, metric=metric, value=v)
            for granularity, t, q, metric, start, v in lines], batch_size=2000)
        run.manifest, run.records, run.rows, run.digest = manifest, records, len(lines), digest
        run.finished = datetime.now(UTC)
        run.save()
    export = _export(period, lines)
    summary = {"period": period, "records": records, "malformed": malformed, "rows": len(lines), "digest": digest, "run": run.pk,
               "parquet": str(export)}
    progress(f"usage_billing {period}: {records} usage records -> {len(lines)} rollup rows (digest {digest[:12]})")
    return summary


def _export(period: str, lines: list[tuple]):
    """The period's rollups as Parquet, partitioned by period: $TIDEWAY_HOME/exports/usage/period=YYYY-MM/
    (``hourly.parquet`` and ``daily.parquet``, replaced by each run)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from django.conf import settings

    directory = settings.TIDEWAY_HOME / "exports" / "usage" / f"period={period}"
    directory.mkdir(parents=True, exist_ok=True)
    schema = pa.schema([("tenant_id", pa.int64()), ("queue", pa.string()), ("metric", pa.string()),
                        ("start", pa.timestamp("ms", tz="UTC")), ("value", pa.int64())])
    for granularity, name in (("hour", "hourly.parquet"), ("day", "daily.parquet")):
        rows = [line[1:] for line in lines if line[0] == granularity]
        table = pa.table({"tenant_id": [r[0] for r in rows], "queue": [r[1] for r in rows], "metric": [r[2] for r in rows],
                          "start": [r[3] for r in rows], "value": [r[4] for r in rows]}, schema=schema)
        temporary = directory / f".{name}.tmp"
        pq.write_table(table, temporary)
        temporary.replace(directory / name)  # readers see the old file or the new one, never half of one
    return directory
