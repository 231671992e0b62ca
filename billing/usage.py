"""A tenant's usage as the API and the console show it: the job's rollups, by hour or day, by metric or queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tideway_server.controlplane.errors import ActionError
from tideway_server.controlplane.moments import moment as _moment

GRANULARITIES = ("hour", "day")
GROUPINGS = ("metric", "queue")
MAX_BUCKETS = 24 * 93  # a quarter by hour
UNITS = {"messages_in": "messages", "messages_out": "messages", "bytes_in": "bytes", "bytes_out": "bytes",
         "requests": "requests", "storage_byte_seconds": "byte-seconds", "partition_seconds": "partition-seconds",
         "gateway_requests": "requests", "gateway_bytes_in": "bytes", "gateway_bytes_out": "bytes"}


def usage(tenant, *, start: str | None, end: str | None, granularity: str = "day", group_by: str = "metric") -> dict:
    from tideway_server.billing.models import UsageRollup, UsageRun

    if granularity not in GRANULARITIES:
        raise ActionError("invalid_request", f"granularity is {' or '.join(GRANULARITIES)}", details={"field": "granularity"})
    if group_by not in GROUPINGS:
        raise ActionError("invalid_request", f"group_by is {' or '.join(GROUPINGS)}", details={"field": "group_by"})
    now = datetime.now(UTC)
    begin = _moment(start, "from") if start else now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    finish = _moment(end, "to") if end else now
    if finish <= begin:
        raise ActionError("invalid_request", "to must be after from", details={"field": "to"})
    step = timedelta(hours=1) if granularity == "hour" else timedelta(days=1)
    if (finish - begin) / step > MAX_BUCKETS:  # (also keeps far-off dates from reaching the database)
        raise ActionError("invalid_request", f"at most {MAX_BUCKETS} {granularity}s at a time: narrow from and to, "
                          "or ask by day", details={"field": "granularity"})
    rows = UsageRollup.objects.filter(tenant=tenant, granularity=granularity, start__gte=begin, start__lt=finish)
    series: dict[tuple, int] = {}
    totals: dict[str, int] = {}
    for row in rows.values_list("start", "queue", "metric", "value"):
        moment, queue, metric, value = row
        key = (moment, metric, queue if group_by == "queue" else None)
        series[key] = series.get(key, 0) + value
        totals[metric] = totals.get(metric, 0) + value
    last = UsageRun.objects.filter(finished__isnull=False).order_by("-finished").first()
    return {
        "from": begin.isoformat().replace("+00:00", "Z"), "to": finish.isoformat().replace("+00:00", "Z"),
        "granularity": granularity, "group_by": group_by,
        "series": [{"start": moment.isoformat().replace("+00:00", "Z"), "metric": metric,
                    **({"queue": queue} if group_by == "queue" else {}), "value": value, "unit": UNITS.get(metric, "")}
                   for (moment, metric, queue), value in sorted(series.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2] or ""))],
        "totals": totals,
        "computed_at": last.finished.isoformat().replace("+00:00", "Z") if last else None,
    }
