"""The ``consumer_lag`` job: ``__lag`` of every cluster -> lag rollups and group statuses in the database.

Each run rewrites what may have changed since the last: minute rollups from the last minute the previous run
wrote and hour rollups from that minute's hour (so it reads at most a little over an hour of looks), and every
group's status over the newest ``window`` samples. Day rollups are written once a day is over, by the first
run after midnight (UTC), which reads that whole day, so a day's percentiles are exact. The first run ever reads
from the start of yesterday. Minute rollups are kept 90 days, hours and days 400.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import UTC, datetime, timedelta

log = logging.getLogger(__name__)

WINDOW_SAMPLES = 10
KEEP_MINUTES_DAYS = 90
KEEP_HOURS_DAYS = 400


def _floor(ms: int, size: int) -> int:
    return ms // size * size


def _stamp(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


async def _has_topic(bootstrap: str, key: str | None, topic: str) -> bool:
    from tideway.native import TidewayClient
    from tideway.native.credentials import ApiKey
    from tideway.protocol import errors

    async with TidewayClient(bootstrap, credentials=ApiKey(key) if key else None) as client:
        try:
            await client.partitions_for(topic)
        except errors.UnknownTopicOrPartitionError:
            return False
        return True


def run_consumer_lag(*, master: str = "local[*]", bootstrap: str | None = None, window: int = WINDOW_SAMPLES,
                     progress=print) -> dict:
    from django.db import transaction
    from django.db.models import Max
    from tideway_server.clusters.admin import bootstrap_of, broker_credentials
    from tideway_server.clusters.models import Cluster
    from tideway_server.lag.models import LagRollup, LagStatus
    from tideway_server.lag.status import Sample, judge_group
    from tideway_server.lag.store import LAG_TOPIC
    from tideway_server.spark_analytics.lag import (
        DAY_MS,
        GRANULARITIES,
        HOUR_MS,
        lag_samples,
        last_window,
        rollups,
    )
    from tideway_server.spark_analytics.session import spark_session
    from tideway_server.tenants.models import Tenant

    started = time.perf_counter()
    key = None if bootstrap else broker_credentials().key
    sources = {"given": bootstrap} if bootstrap else {c.name: bootstrap_of(c) for c in Cluster.objects.all()}
    newest = LagRollup.objects.filter(granularity=LagRollup.MINUTE).aggregate(m=Max("start"))["m"]
    today = _floor(int(time.time() * 1000), DAY_MS)
    if newest is None:
        since = today - DAY_MS
        write_from = {"minute": since, "hour": since}
    else:
        last = int(newest.timestamp() * 1000)
        write_from = {"minute": last, "hour": _floor(last, HOUR_MS)}
        # A day that ended since the last run is read whole, once, for its day rollups.
        since = _floor(last, DAY_MS) if _floor(last, DAY_MS) < today else write_from["hour"]
    days_from = _floor(since, DAY_MS) if _floor(since, DAY_MS) < today else None  # complete days in what is read
    progress(f"consumer_lag: reading {LAG_TOPIC} written since {_stamp(since).isoformat()}")
    spark = spark_session(master, app="consumer_lag")
    slots: dict[str, list] = {g: [] for g in GRANULARITIES}
    windows: dict[tuple, list] = {}
    for _name, address in sources.items():
        reader = (spark.read.format("tideway").option("bootstrap", address).option("subscribe", LAG_TOPIC)
                  .option("minPartitions", str(2 * spark.sparkContext.defaultParallelism))
                  .option("startingTimestamp", str(since)))
        if key:
            reader = reader.option("apiKey", key)
        if not asyncio.run(_has_topic(address, key, LAG_TOPIC)):
            continue  # nothing sampled on this cluster yet
        samples = lag_samples(reader.load()).cache()
        for granularity in ("minute", "hour"):
            slots[granularity] += rollups(samples, granularity, write_from[granularity]).collect()
        if days_from is not None:
            slots["day"] += rollups(samples, "day", days_from, to_ms=today).collect()
        for row in last_window(samples, window).collect():
            windows.setdefault((row.tenant_id, row.queue, row.kind, row.group), {}).setdefault(row.partition, []).append(row)
        samples.unpersist()
    spark_s = time.perf_counter() - started
    known = set(Tenant.objects.values_list("pk", flat=True))
    statuses = []
    for (tenant_id, queue, kind, group), partitions in windows.items():
        if tenant_id not in known:
            continue
        state = judge_group(kind, {p: [Sample(r.at_ms, r.position, r.log_end, r.lag, r.lag_ms, r.in_flight, r.members)
                                       for r in rows] for p, rows in partitions.items()})
        ats = [r.at_ms for rows in partitions.values() for r in rows]
        statuses.append(LagStatus(tenant_id=tenant_id, queue=queue, kind=kind, group=group,
                                  window_start=_stamp(min(ats)), window_end=_stamp(max(ats)), **state))
    now = datetime.now(UTC)
    written = 0
    replace_from = {**write_from, "day": days_from}
    with transaction.atomic():
        for granularity in GRANULARITIES:
            if replace_from[granularity] is None:
                continue
            LagRollup.objects.filter(granularity=granularity, start__gte=_stamp(replace_from[granularity])).delete()
            rows = [LagRollup(tenant_id=r.tenant_id, queue=r.queue, kind=r.kind, group=r.group, partition=r.partition,
                              granularity=granularity, start=_stamp(r.start_ms), samples=r.samples, lag_max=r.lag_max,
                              lag_mean=r.lag_mean, lag_p95=r.lag_p95, lag_ms_max=r.lag_ms_max, lag_ms_mean=r.lag_ms_mean,
                              lag_ms_p95=r.lag_ms_p95)
                    for r in slots[granularity] if r.tenant_id in known]
            LagRollup.objects.bulk_create(rows, batch_size=2000)
            written += len(rows)
        LagStatus.objects.all().delete()
        LagStatus.objects.bulk_create(statuses, batch_size=2000)
        LagRollup.objects.filter(granularity=LagRollup.MINUTE, start__lt=now - timedelta(days=KEEP_MINUTES_DAYS)).delete()
        LagRollup.objects.filter(start__lt=now - timedelta(days=KEEP_HOURS_DAYS)).delete()
    summary = {"rollups": written, "groups": len(statuses), "since": _stamp(since).isoformat(),
               "seconds": round(time.perf_counter() - started, 1), "spark_seconds": round(spark_s, 1)}
    progress(f"consumer_lag: {written} rollup rows, {len(statuses)} group statuses in {summary['seconds']} s")
    return summary
