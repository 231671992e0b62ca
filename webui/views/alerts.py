"""Alert rules and notification channels in the console: list and create (with a preview of the metric's recent
values), a rule's history with every delivery and attempt, silence, test-fire a channel — the API's actions."""

from __future__ import annotations

from django.http import Http404
from django.shortcuts import redirect
from django.views.decorators.http import require_POST, require_safe
from tideway_server.controlplane.errors import ActionError
from tideway_server.webui.access import member_page
from tideway_server.webui.render import confirmation, confirmed, field_errors, forbidden, page

COMPARATORS = (">", ">=", "<", "<=")


def _may_change(request) -> bool:
    return request.principal.has_scope("manage")


# The action's field names (``details.fields``) and the form's inputs.
FORM_FIELDS = {"pending.m": "pending_m", "pending.n": "pending_n", "url": "target", "email": "target"}


def _number(text: str):
    """A float when the text is one; else the text itself, for the action to refuse in its own words."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return text


def _whole(text: str, default: int):
    text = (text or "").strip()
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        return text


def _rule_form(post) -> dict:
    """The rule form as the action takes it (empty optional fields left out)."""
    data = {"name": post.get("name", ""), "metric": post.get("metric", ""), "queue": post.get("queue", ""),
            "group": post.get("group", ""), "comparator": post.get("comparator", ">"),
            "threshold": _number(post.get("threshold")), "channels": post.getlist("channels"),
            "missing_data": post.get("missing_data", "insufficient_data"),
            "pending": {"m": _whole(post.get("pending_m"), 1), "n": _whole(post.get("pending_n"), 1)},
            "repeat_interval_s": _whole(post.get("repeat_interval_s"), 0)}
    if post.get("recovery_threshold", "").strip():
        data["recovery_threshold"] = _number(post["recovery_threshold"])
    return data


def _form_of_rule(rule: dict) -> dict:
    """The form's values for an existing rule (the edit form starts from them)."""
    return {"name": rule["name"], "metric": rule["metric"], "queue": rule["queue"] or "", "group": rule["group"] or "",
            "comparator": rule["comparator"], "threshold": f"{rule['threshold']:g}",
            "recovery_threshold": f"{rule['recovery_threshold']:g}", "pending_m": rule["pending"]["m"],
            "pending_n": rule["pending"]["n"], "missing_data": rule["missing_data"],
            "repeat_interval_s": rule["repeat_interval_s"], "channels": rule["channels"]}


def _posted(post) -> dict:
    """What was typed, to show again with the errors (the channels as a list)."""
    return {**post.dict(), "channels": post.getlist("channels")}


def _rule_choices(tenant) -> dict:
    from tideway_server.alerts.actions import channel_json
    from tideway_server.alerts.models import METRICS, MISSING_DATA, NotificationChannel
    from tideway_server.topics.models import Queue

    return {"metrics": METRICS.items(), "comparators": COMPARATORS, "missing_data": MISSING_DATA,
            "queues": Queue.objects.filter(tenant=tenant).order_by("name").values_list("name", flat=True),
            "channels": [channel_json(c) for c in NotificationChannel.objects.filter(tenant=tenant).order_by("name")]}


def _alerts_page(request, *, rule_form=None, rule_errors=None, channel_form=None, channel_errors=None):
    from tideway_server.alerts.actions import rule_json
    from tideway_server.alerts.models import AlertRule

    tenant = request.principal.tenant
    rules = [rule_json(r) for r in AlertRule.objects.filter(tenant=tenant).prefetch_related("channels").order_by("name")]
    failed = bool(rule_errors or channel_errors)
    return page(request, "alerts.html", {
        "rules": rules, **_rule_choices(tenant), "may_change": _may_change(request),
        "form": rule_form or {}, "errors": rule_errors or {}, "channel_form": channel_form or {},
        "channel_errors": channel_errors or {}, "created_secret": request.session.pop("channel_secret", None),
        "test": request.session.pop("channel_test", None), "deleted": request.session.pop("alerts_deleted", None)},
        status=400 if failed else 200)


@member_page()
def alerts(request):
    from tideway_server.alerts.actions import do_create_rule

    if request.method == "POST":
        if not _may_change(request):
            return forbidden(request, "Creating alert rules needs the 'manage' scope: ask an owner or admin.")
        try:
            rule = do_create_rule(request.principal.tenant, _rule_form(request.POST), acting=request.principal.actor)
        except ActionError as exc:
            return _alerts_page(request, rule_form=_posted(request.POST), rule_errors=field_errors(exc, FORM_FIELDS))
        return redirect(f"/console/alerts/{rule.pk}")
    return _alerts_page(request)


def _rule(request, rule_id: int):
    from tideway_server.alerts.models import AlertRule

    rule = AlertRule.objects.filter(tenant=request.principal.tenant, pk=rule_id).prefetch_related("channels").first()
    if rule is None:
        raise Http404("no such alert rule")
    return rule


@member_page()
def alert_detail(request, rule_id: str):
    from datetime import UTC, datetime, timedelta

    from tideway_server.alerts.actions import do_update_rule, event_json, rule_json

    rule = _rule(request, int(rule_id))
    error = ""
    if request.method == "POST":
        if not _may_change(request):
            return forbidden(request, "Changing alert rules needs the 'manage' scope: ask an owner or admin.")
        action = request.POST.get("action")
        try:
            if action == "silence":
                minutes = int(request.POST.get("minutes") or 60)
                until = datetime.now(UTC) + timedelta(minutes=max(1, min(minutes, 7 * 24 * 60)))
                rule = do_update_rule(rule, {"silenced_until": until.isoformat()}, acting=request.principal.actor)
            elif action == "unsilence":
                rule = do_update_rule(rule, {"silenced_until": None}, acting=request.principal.actor)
            elif action in ("enable", "disable"):
                rule = do_update_rule(rule, {"enabled": action == "enable"}, acting=request.principal.actor)
            return redirect(f"/console/alerts/{rule.pk}")
        except ValueError:
            error = "the silence is a whole number of minutes"
        except ActionError as exc:
            error = exc.message
    events = [event_json(e) for e in rule.events.order_by("-sequence")[:100]]
    return page(request, "alert.html", {"rule": rule_json(rule), "events": events, "may_change": _may_change(request),
                                        "error": error}, status=400 if error else 200)


@member_page(scope="manage")
def alert_edit(request, rule_id: str):
    """Change a rule: the create form, filled in with the rule (its state and history stay)."""
    from tideway_server.alerts.actions import do_update_rule, rule_json

    rule = _rule(request, int(rule_id))
    form, errors = _form_of_rule(rule_json(rule)), {}
    if request.method == "POST":
        try:
            do_update_rule(rule, _rule_form(request.POST), acting=request.principal.actor)
        except ActionError as exc:
            form, errors = _posted(request.POST), field_errors(exc, FORM_FIELDS)
        else:
            return redirect(f"/console/alerts/{rule.pk}")
    return page(request, "alert_edit.html", {"rule": rule_json(rule), "form": form, "errors": errors,
                                             **_rule_choices(request.principal.tenant)},
                status=400 if errors else 200)


@member_page(scope="manage")
def alert_delete(request, rule_id: str):
    from tideway_server.alerts.actions import do_delete_rule

    rule = _rule(request, int(rule_id))
    if not confirmed(request, rule.name):
        return confirmation(
            request, title=f"Delete the alert rule {rule.name}",
            consequence="The rule stops being evaluated and its history (firings, resolutions and their deliveries) "
                        "is deleted with it. Its channels stay.",
            undo="This cannot be undone. To stop it for a while instead, silence it or turn it off on its page.",
            word=rule.name, word_label="the rule's name", button="Delete rule", cancel=f"/console/alerts/{rule.pk}",
            error="" if request.method != "POST" else f"type the rule's name ({rule.name}) to delete it")
    do_delete_rule(rule, acting=request.principal.actor)
    request.session["alerts_deleted"] = f"The rule {rule.name} was deleted."
    return redirect("/console/alerts")


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
    except ActionError as exc:  # the page again, the channel form as typed and each mistake beside its field
        return _alerts_page(request, channel_form=request.POST.dict(), channel_errors=field_errors(exc, FORM_FIELDS))
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
    from tideway_server.alerts.actions import do_rotate_secret, do_test_channel

    if not _may_change(request):
        return forbidden(request, "Changing channels needs the 'manage' scope: ask an owner or admin.")
    channel = _channel(request, channel_id)
    if action == "test":  # sent now, while the member waits (a few seconds at most): the outcome on the next page
        delivery = do_test_channel(channel, acting=request.principal.actor)
        outcome = delivery.attempts[-1] if delivery.attempts else {}
        request.session["channel_test"] = {"channel": channel.name, "status": delivery.status,
                                           "status_code": outcome.get("status_code"), "error": outcome.get("error", "")}
    elif action == "rotate":
        secret = do_rotate_secret(channel, acting=request.principal.actor)
        request.session["channel_secret"] = {"channel": channel.name, "secret": secret}
    elif action == "finish-rotation":
        do_rotate_secret(channel, acting=request.principal.actor, finish=True)
    return redirect("/console/alerts#channels")


@member_page(scope="manage")
def channel_delete(request, channel_id: str):
    from tideway_server.alerts.actions import do_delete_channel

    channel = _channel(request, channel_id)
    rules = list(channel.rules.order_by("name").values_list("name", flat=True))
    if not confirmed(request, channel.name):
        using = f" The rules {', '.join(rules)} notify it and will notify their other channels only." if rules else ""
        return confirmation(
            request, title=f"Delete the channel {channel.name}",
            consequence=f"Nothing more is sent to {channel.url or channel.email}, and its deliveries' history is "
                        f"deleted.{using}",
            undo="This cannot be undone: a new channel gets a new signing secret.",
            word=channel.name, word_label="the channel's name", button="Delete channel", cancel="/console/alerts#channels",
            error="" if request.method != "POST" else f"type the channel's name ({channel.name}) to delete it")
    do_delete_channel(channel, acting=request.principal.actor)
    request.session["alerts_deleted"] = f"The channel {channel.name} was deleted."
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
    from tideway_server.alerts.inputs import (
        live_samples,
        oldest_open_transactions,
        recent_throttling,
    )
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
                     throttled=lambda: (recent_throttling([tenant.pk]) or {}).get(tenant.pk),
                     oldest_transaction=lambda: oldest_open_transactions([tenant.pk]).get(tenant.pk))
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
