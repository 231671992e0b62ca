"""A group's lag as the API and the console show it: the latest look (live, from Redis), its status and
time-to-drain (the consumer_lag job), and its history (the job's rollups)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tideway_server.controlplane.errors import ActionError
from tideway_server.controlplane.moments import moment

STEPS = {"minute": timedelta(minutes=1), "hour": timedelta(hours=1), "day": timedelta(days=1)}
DEFAULT_SPAN = {"minute": timedelta(hours=1), "hour": timedelta(days=2), "day": timedelta(days=90)}
MAX_POINTS = 1_500


def live_sample(tenant_id: int, queue: str, kind: str, group: str) -> dict | None:
    """The latest look at the group (every few seconds), or None when it has not been seen."""
    import redis
    from django.conf import settings
    from tideway_server.lag.sampler import group_key
    from tideway_server.lag.store import redis_key

    connection = redis.Redis.from_url(settings.TIDEWAY_REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
    try:
        value = connection.hget(redis_key(tenant_id), group_key(queue, kind, group))
    except redis.RedisError:
        return None  # the live view is best effort: history and status come from the database
    finally:
        connection.close()
    if value is None:
        return None
    sample = json.loads(value)
    sample.pop("tenant_id", None)
    sample.pop("window", None)
    state = sample.pop("status", None)
    sample["status"] = None if state is None else {
        "status": state["status"], "lag": state["lag"], "lag_seconds": state["lag_ms"] / 1000,
        "produce_rate": state["produce_rate"], "consume_rate": state["consume_rate"], "drain_seconds": state["drain_s"],
        "falling_behind": state["falling_behind"], "partitions": state["partitions"], "source": "looks",
        "window_start": _stamp(datetime.fromtimestamp(state["window_start_ms"] / 1000, UTC)),
        "window_end": _stamp(datetime.fromtimestamp(state["window_end_ms"] / 1000, UTC))}
    sample["partitions"] = [dict(zip(("partition", "position", "log_end", "lag", "lag_ms", "in_flight", "produce_rate",
                                      "consume_rate"), row, strict=True)) for row in sample["partitions"]]
    return sample


def _stamp(moment_: datetime) -> str:
    return moment_.isoformat().replace("+00:00", "Z")


def group_lag(tenant, queue: str, group: str, *, kind: str = "stream", start: str | None = None, end: str | None = None,
              step: str = "minute", partition: int | None = None) -> dict:
    from tideway_server.lag.models import LagRollup, LagStatus

    if kind not in ("stream", "queue"):
        raise ActionError("invalid_request", 'kind is "stream" or "queue"', details={"field": "kind"})
    if step not in STEPS:
        raise ActionError("invalid_request", f"step is {', '.join(STEPS)}", details={"field": "step"})
    now = datetime.now(UTC)
    finish = moment(end, "to") if end else now
    begin = moment(start, "from") if start else finish - DEFAULT_SPAN[step]
    if finish <= begin:
        raise ActionError("invalid_request", "to must be after from", details={"field": "to"})
    if (finish - begin) / STEPS[step] > MAX_POINTS:
        raise ActionError("invalid_request", f"at most {MAX_POINTS} {step}s at a time: narrow from and to, or take a "
                          "larger step", details={"field": "step"})
    rows = LagRollup.objects.filter(tenant=tenant, queue=queue, kind=kind, group=group, granularity=step,
                                    partition=-1 if partition is None else partition,
                                    start__gte=begin, start__lt=finish).order_by("start")
    series = [{"start": _stamp(r.start), "samples": r.samples, "lag_max": r.lag_max, "lag_mean": round(r.lag_mean, 3),
               "lag_p95": round(r.lag_p95, 3), "lag_seconds_max": r.lag_ms_max / 1000,
               "lag_seconds_mean": round(r.lag_ms_mean / 1000, 3), "lag_seconds_p95": round(r.lag_ms_p95 / 1000, 3)}
              for r in rows]
    status = LagStatus.objects.filter(tenant=tenant, queue=queue, kind=kind, group=group).first()
    live = live_sample(tenant.pk, queue, kind, group)
    if status is None and live is None and not series:
        raise ActionError("group_not_found", f"group {group!r} ({kind}) has no lag recorded on {queue!r}")
    return {
        "queue": queue, "group": group, "kind": kind, "step": step, "from": _stamp(begin), "to": _stamp(finish),
        "partition": partition, "live": live,
        # The consumer_lag job's judgement once it has run; before, the one the looks give (live.status).
        "status": (live or {}).get("status") if status is None else {
            "status": status.status, "lag": status.lag, "lag_seconds": status.lag_ms / 1000,
            "produce_rate": status.produce_rate, "consume_rate": status.consume_rate, "drain_seconds": status.drain_s,
            "falling_behind": status.falling_behind, "partitions": status.partitions, "source": "consumer_lag job",
            "window_start": _stamp(status.window_start), "window_end": _stamp(status.window_end)},
        "series": series,
    }
