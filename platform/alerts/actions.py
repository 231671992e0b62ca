"""Alert rules and notification channels: the changes a tenant may make, validated, audited, in one place (the
API and the console both call these)."""

from __future__ import annotations

import math
import uuid
from contextlib import contextmanager
from datetime import UTC, datetime

from django.db import IntegrityError, transaction
from tideway_server.alerts.models import (
    COMPARATORS,
    METRICS,
    MISSING_DATA,
    AlertRule,
    Delivery,
    NotificationChannel,
)
from tideway_server.controlplane.errors import ActionError
from tideway_server.controlplane.moments import moment
from tideway_server.tenants import audit

MAX_RULES = 200
MAX_CHANNELS = 50
NAME_LENGTH = 100


# How a field is called in a message (the API's field names stay in ``details``).
FIELD_WORDS = {"recovery_threshold": "the recovery threshold", "threshold": "the threshold",
               "pending.n": "N (the evaluations looked at)", "pending.m": "M (the breaching evaluations)",
               "repeat_interval_s": "the reminder interval in seconds", "missing_data": "what to do without data"}


def _invalid(field: str, message: str) -> ActionError:
    return ActionError("invalid_request", message, details={"field": field})


def _words(field: str) -> str:
    return FIELD_WORDS.get(field, field)


def _name(value, field: str = "name") -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > NAME_LENGTH:
        raise _invalid(field, f"the {field} is text of 1 to {NAME_LENGTH} characters")
    return value.strip()


def _number(value, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _invalid(field, f"{_words(field)} is a number")
    return float(value)


def _whole(value, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise _invalid(field, f"{_words(field)} is a whole number from {low} to {high}")
    return value


def _save_new(row, count: int, limit: int, what: str) -> None:
    """Save a new rule or channel of a tenant that has ``count``: 403 past ``limit``, 409 when the name is taken."""
    if count >= limit:
        raise ActionError("quota_exceeded", f"a tenant has at most {limit} {what}s")
    _save_named(row, what)


def _save_named(row, what: str) -> None:
    try:
        with transaction.atomic():
            row.save()
    except IntegrityError:
        raise ActionError("conflict", f"a {what} named {row.name!r} exists") from None


class _Problems:
    """Every field's mistake at once (a form shows each beside its field), not only the first."""

    def __init__(self) -> None:
        self.found: dict[str, ActionError] = {}

    @contextmanager
    def field(self, name: str):
        try:
            yield
        except ActionError as exc:
            self.found.setdefault(name, exc)

    def raise_any(self) -> None:
        if not self.found:
            return
        first_field, first = next(iter(self.found.items()))
        fields = {name: [exc.message] for name, exc in self.found.items()}
        more = f" (and {len(fields) - 1} more)" if len(fields) > 1 else ""
        raise ActionError(first.code, first.message + more, details={"field": first_field, "fields": fields})


# -- channels -----------------------------------------------------------------------------------------------


def channel_json(channel: NotificationChannel) -> dict:
    return {"id": channel.pk, "name": channel.name, "kind": channel.kind, "url": channel.url or None,
            "email": channel.email or None, "secrets": len(channel.secrets),
            "created": channel.created.isoformat().replace("+00:00", "Z")}


def do_create_channel(tenant, data: dict, *, acting: str) -> tuple[NotificationChannel, str | None]:
    """The channel and, for a webhook, its signing secret (shown this once)."""
    from tideway_server.alerts.secrets import new_secret, seal
    from tideway_server.alerts.webhooks import Refused, resolve_public

    problems, secret = _Problems(), None
    channel = NotificationChannel(tenant=tenant, kind=data.get("kind"))
    with problems.field("name"):
        channel.name = _name(data.get("name"))
    with problems.field("kind"):
        if channel.kind not in ("webhook", "email"):
            raise _invalid("kind", 'the kind is "webhook" or "email"')
    if channel.kind == "webhook":
        with problems.field("url"):
            url = data.get("url")
            if not isinstance(url, str) or len(url) > 2000:
                raise _invalid("url", "the URL is the webhook's http:// or https:// address")
            try:
                resolve_public(url)
            except Refused as exc:
                raise _invalid("url", str(exc)) from None
            secret = new_secret()
            channel.url, channel.secrets = url, [seal(secret)]
    elif channel.kind == "email":
        from django.core.exceptions import ValidationError
        from django.core.validators import validate_email

        with problems.field("email"):
            try:
                validate_email(data.get("email"))
            except (ValidationError, TypeError):
                raise _invalid("email", "the e-mail address is not one (name@example.com)") from None
            channel.email = data["email"]
    problems.raise_any()
    with transaction.atomic():
        _save_new(channel, NotificationChannel.objects.filter(tenant=tenant).count(), MAX_CHANNELS, "notification channel")
        audit.record(tenant, acting, "channel.create", channel.name, kind=channel.kind)
    return channel, secret


def do_rotate_secret(channel: NotificationChannel, *, acting: str, finish: bool = False) -> str | None:
    """Start a rotation (a new secret first; the previous one stays valid) or finish it (only the newest stays)."""
    from tideway_server.alerts.secrets import new_secret, seal

    if channel.kind != NotificationChannel.WEBHOOK:
        raise _invalid("kind", "only webhooks have signing secrets")
    secret = None
    if finish:
        channel.secrets = channel.secrets[:1]
    else:
        secret = new_secret()
        channel.secrets = [seal(secret)] + channel.secrets[:1]
    with transaction.atomic():
        channel.save(update_fields=["secrets"])
        audit.record(channel.tenant, acting, "channel.rotate_secret" if not finish else "channel.finish_rotation", channel.name)
    return secret


def do_delete_channel(channel: NotificationChannel, *, acting: str) -> None:
    with transaction.atomic():
        audit.record(channel.tenant, acting, "channel.delete", channel.name)
        channel.delete()


def do_test_channel(channel: NotificationChannel, *, acting: str) -> Delivery:
    """Send a test notification now (recorded like any delivery)."""
    from tideway_server.alerts.evaluate import attempt

    now = datetime.now(UTC)
    payload = {"type": "alert.test", "summary": f"test notification to {channel.name}", "channel": channel.name,
               "at": now.isoformat().replace("+00:00", "Z")}
    delivery = Delivery.objects.create(channel=channel, message_id=f"msg_{uuid.uuid4().hex}", payload=payload,
                                       next_attempt=now)
    audit.record(channel.tenant, acting, "channel.test", channel.name)
    attempt(delivery)
    return delivery


def delivery_json(delivery: Delivery) -> dict:
    return {"id": delivery.pk, "message_id": delivery.message_id, "channel": delivery.channel.name,
            "event": delivery.event_id, "type": delivery.payload.get("type"), "status": delivery.status,
            "attempts": delivery.attempts,
            "next_attempt": delivery.next_attempt.isoformat().replace("+00:00", "Z") if delivery.next_attempt else None,
            "created": delivery.created.isoformat().replace("+00:00", "Z")}


# -- rules --------------------------------------------------------------------------------------------------


def rule_json(rule: AlertRule) -> dict:
    def stamp(value):
        return value.isoformat().replace("+00:00", "Z") if value else None

    return {"id": rule.pk, "name": rule.name, "metric": rule.metric, "queue": rule.queue or None, "group": rule.group or None,
            "comparator": rule.comparator, "threshold": rule.threshold, "recovery_threshold": rule.recovery_threshold,
            "pending": {"m": rule.pending_m, "n": rule.pending_n}, "missing_data": rule.missing_data,
            "repeat_interval_s": rule.repeat_interval_s, "channels": sorted(c.name for c in rule.channels.all()),
            "enabled": rule.enabled, "silenced_until": stamp(rule.silenced_until), "state": rule.state,
            "state_since": stamp(rule.state_since), "value": rule.last_value, "evaluated": stamp(rule.last_evaluated)}


def _rule_fields(tenant, data: dict, rule: AlertRule, *, partial: bool) -> list:
    """Apply ``data`` to ``rule`` after checking every field; the channels named (None: unchanged). All the
    mistakes are reported together: ``details.fields`` maps each field to its message."""
    def given(field):
        return field in data or not partial

    problems, channels = _Problems(), None
    if given("name"):
        with problems.field("name"):
            rule.name = _name(data.get("name"))
    if given("metric"):
        with problems.field("metric"):
            if data.get("metric") not in METRICS:
                raise _invalid("metric", f"the metric is one of {', '.join(METRICS)}")
            rule.metric = data["metric"]
    for field in ("queue", "group"):
        if field in data:
            with problems.field(field):
                value = data[field] or ""
                if not isinstance(value, str) or len(value) > 100:
                    raise _invalid(field, f"the {field} is a name (or empty: every {field})")
                setattr(rule, field, value)
    if rule.queue and "queue" not in problems.found:
        from tideway_server.topics.models import Queue

        with problems.field("queue"):
            if not Queue.objects.filter(tenant=tenant, name=rule.queue).exists():
                raise ActionError("queue_not_found", f"queue {rule.queue!r} does not exist")
    if "comparator" in data:
        with problems.field("comparator"):
            if data["comparator"] not in COMPARATORS:
                raise _invalid("comparator", f"the comparator is one of {' '.join(COMPARATORS)}")
            rule.comparator = data["comparator"]
    if given("threshold"):
        with problems.field("threshold"):
            rule.threshold = _number(data.get("threshold"), "threshold")
    with problems.field("recovery_threshold"):
        if "recovery_threshold" in data:
            rule.recovery_threshold = _number(data["recovery_threshold"], "recovery_threshold")
        elif not partial:
            rule.recovery_threshold = rule.threshold
        # The recovery threshold lies on the safe side of the threshold (or on it).
        if "threshold" not in problems.found and rule.threshold is not None and rule.recovery_threshold is not None and (
                (rule.comparator in (">", ">=") and rule.recovery_threshold > rule.threshold)
                or (rule.comparator in ("<", "<=") and rule.recovery_threshold < rule.threshold)):
            raise _invalid("recovery_threshold",
                           "the recovery threshold is on the safe side of the threshold (or equal)")
    if "pending" in data:
        pending = data["pending"] if isinstance(data["pending"], dict) else {}
        with problems.field("pending.n"):
            rule.pending_n = _whole(pending.get("n"), "pending.n", 1, 100)
        with problems.field("pending.m"):
            rule.pending_m = _whole(pending.get("m"), "pending.m", 1, rule.pending_n)
    if "missing_data" in data:
        with problems.field("missing_data"):
            if data["missing_data"] not in MISSING_DATA:
                raise _invalid("missing_data", f"{_words('missing_data')} is one of {', '.join(MISSING_DATA)}")
            rule.missing_data = data["missing_data"]
    if "repeat_interval_s" in data:
        with problems.field("repeat_interval_s"):
            rule.repeat_interval_s = _whole(data["repeat_interval_s"], "repeat_interval_s", 0, 7 * 86400)
    if "enabled" in data:
        with problems.field("enabled"):
            if not isinstance(data["enabled"], bool):
                raise _invalid("enabled", "enabled is true or false")
            rule.enabled = data["enabled"]
    if "silenced_until" in data:
        with problems.field("silenced_until"):
            rule.silenced_until = None if data["silenced_until"] in (None, "") else \
                moment(str(data["silenced_until"]), "silenced_until")
    if "channels" in data:
        with problems.field("channels"):
            names = data["channels"]
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise _invalid("channels", "channels is a list of channel names")
            channels = list(NotificationChannel.objects.filter(tenant=tenant, name__in=names))
            missing = sorted(set(names) - {c.name for c in channels})
            if missing:
                raise ActionError("channel_not_found", f"channel {missing[0]!r} does not exist")
    problems.raise_any()
    return channels


def do_create_rule(tenant, data: dict, *, acting: str) -> AlertRule:
    rule = AlertRule(tenant=tenant)
    channels = _rule_fields(tenant, data, rule, partial=False)
    with transaction.atomic():
        _save_new(rule, AlertRule.objects.filter(tenant=tenant).count(), MAX_RULES, "alert rule")
        if channels is not None:
            rule.channels.set(channels)
        audit.record(tenant, acting, "alert.create", rule.name, metric=rule.metric, threshold=rule.threshold)
    return rule


def do_update_rule(rule: AlertRule, data: dict, *, acting: str) -> AlertRule:
    with transaction.atomic():
        rule = AlertRule.objects.select_for_update().get(pk=rule.pk)
        channels = _rule_fields(rule.tenant, data, rule, partial=True)
        _save_named(rule, "alert rule")
        if channels is not None:
            rule.channels.set(channels)
        audit.record(rule.tenant, acting, "alert.update", rule.name, fields=sorted(data))
    return rule


def do_delete_rule(rule: AlertRule, *, acting: str) -> None:
    with transaction.atomic():
        audit.record(rule.tenant, acting, "alert.delete", rule.name)
        rule.delete()


def event_json(event) -> dict:
    return {"sequence": event.sequence, "kind": event.kind, "from": event.from_state, "to": event.to_state,
            "value": event.value, "at": event.at.isoformat().replace("+00:00", "Z"), "silenced": event.silenced,
            "deliveries": [delivery_json(d) for d in event.deliveries.select_related("channel").all()]}
