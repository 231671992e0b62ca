"""Alert rules and notification channels in the console: list and create (with a preview of the metric's recent
values), a rule's history with every delivery and attempt, silence, test-fire a channel — the API's actions."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST, require_safe
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import member_page
from tideway_server.webui.render import forbidden, page

COMPARATORS = (">", ">=", "<", "<=")


def _may_change(request) -> bool:
    return request.principal.has_scope("manage")


def _number(text: str, field: str):
    try:
        return float(text)
    except (TypeError, ValueError):
        raise ActionError("invalid_request", f"{field} is a number") from None


def _rule_form(post) -> dict:
    """The create form as the action takes it (empty optional fields left out)."""
    data = {"name": post.get("name", ""), "metric": post.get("metric", ""), "queue": post.get("queue", ""),
            "group": post.get("group", ""), "comparator": post.get("comparator", ">"),
            "threshold": _number(post.get("threshold"), "threshold"), "channels": post.getlist("channels"),
            "missing_data": post.get("missing_data", "insufficient_data")}
    if post.get("recovery_threshold", "").strip():
        data["recovery_threshold"] = _number(post["recovery_threshold"], "recovery threshold")
    try:
        m, n = int(post.get("pending_m") or 1), int(post.get("pending_n") or 1)
        repeat = int(post.get("repeat_interval_s") or 0)
    except ValueError:
        raise ActionError("invalid_request", "the pending period and the repeat interval are whole numbers") from None
    data["pending"], data["repeat_interval_s"] = {"m": m, "n": n}, repeat
    return data


@member_page()
def alerts(request):
    from tideway_server.alerts.actions import channel_json, do_create_rule, rule_json
    from tideway_server.alerts.models import METRICS, MISSING_DATA, AlertRule, NotificationChannel
    from tideway_server.topics.models import Queue

    tenant = request.principal.tenant
    error = request.session.pop("channel_error", "")
    if request.method == "POST":
        if not _may_change(request):
            return forbidden(request, "Creating alert rules needs the 'manage' scope: ask an owner or admin.")
        try:
            rule = do_create_rule(tenant, _rule_form(request.POST), acting=request.principal.actor)
        except ActionError as exc:
            error = exc.message
        else:
            return redirect(f"/console/alerts/{rule.pk}")
    rules = [rule_json(r) for r in AlertRule.objects.filter(tenant=tenant).prefetch_related("channels").order_by("name")]
    channels = [channel_json(c) for c in NotificationChannel.objects.filter(tenant=tenant).order_by("name")]
    return page(request, "alerts.html", {
        "rules": rules, "channels": channels, "metrics": METRICS.items(), "comparators": COMPARATORS,
        "missing_data": MISSING_DATA, "queues": Queue.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True),
        "may_change": _may_change(request), "error": error, "form": request.POST if error else {},
        "created_secret": request.session.pop("channel_secret", None)}, status=400 if error else 200)


def _rule(request, rule_id: int):
    from tideway_server.alerts.models import AlertRule

    rule = AlertRule.objects.filter(tenant=request.principal.tenant, pk=rule_id).prefetch_related("channels").first()
    if rule is None:
        raise Http404("no such alert rule")
    return rule


@member_page()
def alert_detail(request, rule_id: str):
    from datetime import UTC, datetime, timedelta

    from tideway_server.alerts.actions import do_delete_rule, do_update_rule, event_json, rule_json

    rule = _rule(request, int(rule_id))
    error = ""
    if request.method == "POST":
        if not _may_change(request):
            return forbidden(request, "Changing alert rules needs the 'manage' scope: ask an owner or admin.")
        action = request.POST.get("action")
        try:
            if action == "delete":
                do_delete_rule(rule, acting=request.principal.actor)
                return redirect("/console/alerts")
            if action == "silence":
                minutes = int(request.POST.get("minutes") or 60)
                until = datetime.now(UTC) + timedelta(minutes=max(1, min(minutes, 7 * 24 * 60)))
                rule = do_update_rule(rule, {"silenced_until": until.isoformat()}, acting=request.principal.actor)
            elif action == "unsilence":
                rule = do_update_rule(rule, {"silenced_until": None}, acting=request.principal.actor)
            elif action in ("enable", "disable"):
                rule = do_update_rule(rule, {"enabled": action == "enable"}, acting=request.principal.actor)
            return redirect(f"/console/alerts/{rule.pk}")
        except (ActionError, ValueError) as exc:
            error = getattr(exc, "message", str(exc))
    events = [event_json(e) for e in rule.events.order_by("-sequence")[:100]]
    return page(request, "alert.html", {"rule": rule_json(rule), "events": events, "may_change": _may_change(request),
                                        "error": error})


@require_POST
@member_page()
def channel_create(request):
    from tideway_server.alerts.actions import do_create_channel

    if not _may_change(request):
        return forbidden(request, "Creating channels needs the 'manage' scope: ask an owner or admin.")
    data = {"name": request.POST.get("name", ""), "kind": request.POST.get("kind", "")}
    data["url" if data["kind"] == "webhook" else "email"] = request.POST.get("target", "")
    try:
        channel, secret = do_create_channel(request.principal.tenant, data, acting=request.principal.actor)
    except ActionError as exc:
        request.session["channel_error"] = exc.message
        return redirect("/console/alerts#channels")
    if secret:  # shown once, on the next page
        request.session["channel_secret"] = {"channel": channel.name, "secret": secret}
    return redirect("/console/alerts#channels")


def _channel(request, channel_id: str):
    from tideway_server.alerts.models import NotificationChannel

    channel = NotificationChannel.objects.filter(tenant=request.principal.tenant, pk=int(channel_id)).select_related("tenant").first()
    if channel is None:
        raise Http404("no such channel")
    return channel


@require_POST
@member_page()
def channel_action(request, channel_id: str, action: str):
    from tideway_server.alerts.actions import do_delete_channel, do_rotate_secret, do_test_channel

    if not _may_change(request):
        return forbidden(request, "Changing channels needs the 'manage' scope: ask an owner or admin.")
    channel = _channel(request, channel_id)
    if action == "test":
        delivery = do_test_channel(channel, acting=request.principal.actor)
        outcome = delivery.attempts[-1] if delivery.attempts else {}
        request.session["channel_test"] = {"channel": channel.name, "status": delivery.status,
                                           "status_code": outcome.get("status_code"), "error": outcome.get("error", "")}
    elif action == "rotate":
        secret = do_rotate_secret(channel, acting=request.principal.actor)
        request.session["channel_secret"] = {"channel": channel.name, "secret": secret}
    elif action == "finish-rotation":
        do_rotate_secret(channel, acting=request.principal.actor, finish=True)
    elif action == "delete":
        do_delete_channel(channel, acting=request.principal.actor)
    return redirect("/console/alerts#channels")


@require_safe
@member_page()
def channel_deliveries(request, channel_id: str):
    from tideway_server.alerts.actions import channel_json, delivery_json
    from tideway_server.alerts.models import Delivery

    channel = _channel(request, channel_id)
    rows = Delivery.objects.filter(channel=channel).select_related("channel").order_by("-created")[:200]
    return page(request, "channel.html", {"channel": channel_json(channel), "deliveries": [delivery_json(d) for d in rows],
                                          "test": request.session.pop("channel_test", None)})


@require_safe
@member_page()
def preview(request):
    """The metric's values now (from the latest looks) and over the last hour (minute rollups), for the create form."""
    from tideway_server.alerts.evaluate import Scope, rule_value
    from tideway_server.alerts.inputs import live_samples, recent_throttling
    from tideway_server.alerts.models import METRICS, AlertRule
    from tideway_server.lag.models import LagRollup

    metric = request.GET.get("metric", "lag_seconds")
    if metric not in METRICS:
        metric = "lag_seconds"
    tenant = request.principal.tenant
    probe = AlertRule(tenant=tenant, metric=metric, queue=request.GET.get("queue", ""), group=request.GET.get("group", ""),
                      comparator=">", threshold=0)
    import time

    from tideway_server.topics.actions import quota_use

    now = rule_value(probe, Scope(live_samples([tenant.pk]).get(tenant.pk, {})), int(time.time() * 1000), 60_000,
                     quota_percent=lambda: max(q["percent"] for q in quota_use(tenant)),
                     throttled=lambda: (recent_throttling([tenant.pk]) or {}).get(tenant.pk))
    hour = []
    if metric in ("lag", "lag_seconds"):
        from datetime import UTC, datetime, timedelta

        rows = LagRollup.objects.filter(tenant=tenant, granularity="minute", partition=-1,
                                        start__gte=datetime.now(UTC) - timedelta(hours=1))
        if probe.queue:
            rows = rows.filter(queue=probe.queue)
        if probe.group:
            rows = rows.filter(group=probe.group)
        worst: dict = {}
        for row in rows:
            value = row.lag_max if metric == "lag" else row.lag_ms_max / 1000
            worst[row.start] = max(worst.get(row.start, value), value)
        hour = [{"start": start.strftime("%H:%M"), "value": value} for start, value in sorted(worst.items())]
    return page(request, "htmx/alert_preview.html", {"metric": metric, "now": now, "hour": hour,
                                                     "peak": max((p["value"] for p in hour), default=None)})
