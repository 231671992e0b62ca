"""Evaluating alert rules against the live lag samples, and sending what they decided.

Every ``TIDEWAY_ALERTS_EVALUATE_S`` (10 s) each enabled rule gets a value: over the groups (and queues) in its
scope, the worst one — the largest for ``>``/``>=`` rules, the smallest for ``<``/``<=``. Samples older than
three looks count as missing. Then, per rule:

* the evaluation (breaching or not; missing data as the rule's policy says) joins the last N;
* OK, PENDING or INSUFFICIENT_DATA becomes FIRING when M of the last N breached, PENDING when this one did,
  else OK (INSUFFICIENT_DATA when data is missing and the policy says so);
* FIRING becomes OK only when the value is on the safe side of the recovery threshold (missing data keeps
  it FIRING unless the policy reads it as not breaching); while FIRING, a reminder every repeat interval;
* entering FIRING is notified as ``firing``, leaving it as ``resolved``: the new state is written only if the
  rule's state and transition count are still what this evaluation started from (compare-and-set), together
  with the event and one delivery per channel, so a transition is notified once whoever evaluates it and
  whatever dies afterwards. A silenced rule records its events without deliveries.

Deliveries are sent by ``send_due`` (webhooks and e-mail), retried with backoff (5 s doubling to 30 min, or
what ``Retry-After`` asks) for up to 8 attempts, never after a 410. Every attempt is kept on the delivery.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from datetime import UTC, datetime, timedelta

from tideway_server.alerts.models import (
    COMPARATORS,
    AlertEvent,
    AlertRule,
    Delivery,
    NotificationChannel,
)

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 8
FIRST_RETRY_S = 5
MAX_RETRY_S = 1800
KEEP_DELIVERIES_DAYS = 90


def _metric_value(rule: AlertRule, sample: dict) -> float | None:
    metric = rule.metric
    if metric == "lag":
        return sample["lag"]
    if metric == "lag_seconds":
        return sample["lag_ms"] / 1000
    if metric == "oldest_unacked_seconds":
        return None if sample.get("oldest_unacked_ms") is None else sample["oldest_unacked_ms"] / 1000
    if metric == "dead_letters":
        return sample.get("dead_letters")
    if metric == "publish_rate":
        return sample["produce_rate"]
    if metric == "consume_rate":
        return sample["consume_rate"]
    return None


class Scope:
    """A tenant's latest looks, indexed for rules: by (queue, group), by queue, and all (built once per round)."""

    def __init__(self, samples: dict[str, dict]) -> None:
        self.all = list(samples.values())
        self.by_queue: dict[str, list[dict]] = {}
        self.by_group: dict[tuple[str, str], list[dict]] = {}
        self.by_group_name: dict[str, list[dict]] = {}
        for sample in self.all:
            self.by_queue.setdefault(sample["queue"], []).append(sample)
            self.by_group.setdefault((sample["queue"], sample["group"]), []).append(sample)
            self.by_group_name.setdefault(sample["group"], []).append(sample)

    def matching(self, queue: str, group: str) -> list[dict]:
        if queue and group:
            return self.by_group.get((queue, group), [])
        if queue:
            return self.by_queue.get(queue, [])
        if group:
            return self.by_group_name.get(group, [])
        return self.all


def rule_value(rule: AlertRule, scope: Scope, now_ms: int, stale_ms: int, quota_percent=None,
               throttled=None, oldest_transaction=None) -> float | None:
    """The rule's value now over its scope, or None when there is no (fresh) data.

    ``quota_percent``, ``throttled`` and ``oldest_transaction``: callables giving the tenant-wide metrics (read
    only when a rule asks).
    """
    if rule.metric == "quota_use":
        return quota_percent() if quota_percent else None
    if rule.metric == "throttled":
        return throttled() if throttled else None
    if rule.metric == "oldest_transaction_seconds":
        return oldest_transaction() if oldest_transaction else None
    values = []
    for sample in scope.matching(rule.queue, rule.group):
        if now_ms - sample["at_ms"] > stale_ms:
            continue
        value = _metric_value(rule, sample)
        if value is not None:
            values.append(float(value))
    if not values:
        return None
    return max(values) if rule.comparator in (">", ">=") else min(values)


def _payload(rule: AlertRule, kind: str, value: float | None, at: datetime, sequence: int) -> dict:
    scope = f"{rule.queue or 'every queue'}" + (f" / {rule.group}" if rule.group else "")
    verb = {"firing": "is firing", "resolved": "is resolved", "reminder": "is still firing", "test": "test"}[kind]
    return {"type": f"alert.{kind}", "summary": f"{rule.name} {verb}: {rule.metric} {rule.comparator} {rule.threshold:g} "
                                                 f"on {scope} (now {value if value is None else round(value, 3)})",
            "rule": {"id": rule.pk, "name": rule.name, "metric": rule.metric, "queue": rule.queue, "group": rule.group,
                     "comparator": rule.comparator, "threshold": rule.threshold, "recovery_threshold": rule.recovery_threshold},
            "state": rule.state, "value": value, "at": at.isoformat().replace("+00:00", "Z"), "sequence": sequence}


def _record(rule: AlertRule, kind: str, from_state: str, value: float | None, now: datetime) -> None:
    """The event of the rule's newest transition and, unless silenced, a delivery per channel (inside the caller's
    transaction, with the rule's new state)."""
    silenced = rule.silenced_until is not None and rule.silenced_until > now
    event = AlertEvent.objects.create(rule=rule, sequence=rule.transitions, kind=kind, from_state=from_state,
                                      to_state=rule.state, value=value, at=now, silenced=silenced)
    if silenced:
        return
    payload = _payload(rule, kind, value, now, rule.transitions)
    Delivery.objects.bulk_create([
        Delivery(event=event, channel=channel, message_id=f"msg_{uuid.uuid4().hex}", payload=payload, next_attempt=now)
        for channel in rule.channels.all()])


def step(rule: AlertRule, value: float | None, now: datetime) -> str | None:
    """One evaluation of ``rule`` with ``value`` (None: missing), in memory: the rule's new state and recent
    evaluations; returns what to notify (firing, resolved, reminder) or None."""
    breaches = COMPARATORS[rule.comparator]
    missing = value is None
    if missing:
        if rule.missing_data == "breaching":
            breach = True
        elif rule.missing_data == "keep_last":
            breach = bool(rule.recent[-1]) if rule.recent else False
        else:
            breach = False
    else:
        breach = breaches(value, rule.threshold)
    rule.recent = (list(rule.recent) + [breach])[-rule.pending_n:]
    rule.last_value, rule.last_evaluated = value, now
    before = rule.state
    notify = None
    if before == AlertRule.FIRING:
        if missing:
            recovered = rule.missing_data == "not_breaching"
        else:
            recovered = not breaches(value, rule.recovery_threshold)
        if recovered:
            rule.state, rule.recent, notify = AlertRule.OK, [], "resolved"
        elif rule.repeat_interval_s and rule.last_notified and now - rule.last_notified >= timedelta(seconds=rule.repeat_interval_s):
            notify = "reminder"
    elif missing and rule.missing_data == "insufficient_data":
        rule.state = AlertRule.INSUFFICIENT_DATA
    elif sum(1 for b in rule.recent if b) >= rule.pending_m:
        rule.state, notify = AlertRule.FIRING, "firing"
    else:
        rule.state = AlertRule.PENDING if breach else AlertRule.OK
    if rule.state != before:
        rule.state_since = now
    return notify


def evaluate_all(live: dict[int, dict[str, dict]], *, stale_ms: int, throttled: dict[int, float] | None = None,
                 oldest_transactions: dict[int, float | None] | None = None) -> dict:
    """Evaluate every enabled rule; ``live``: {tenant id: {group key: sample}} (lag/store.py); ``throttled``:
    {tenant id: times throttled lately} for tenants with a ``throttled`` rule (None: unknown, Redis did not answer);
    ``oldest_transactions``: {tenant id: seconds its oldest open transaction is open} for tenants with an
    ``oldest_transaction_seconds`` rule (alerts.inputs).

    One query reads the rules; a rule whose state changes is written with a compare-and-set on its state and
    transition count (another evaluator that got there first wins, and this one records nothing), together with
    its event and deliveries; the rest is written in one bulk update."""
    from django.db import transaction
    from tideway_server.topics.actions import quota_use

    now = datetime.now(UTC)
    now_ms = int(now.timestamp() * 1000)
    from tideway_server.tenants.models import Tenant

    rules = list(AlertRule.objects.filter(enabled=True))
    quotas: dict[int, float] = {}

    def quota_percent(tenant_id: int) -> float:
        if tenant_id not in quotas:
            quotas[tenant_id] = max(q["percent"] for q in quota_use(Tenant.objects.select_related("plan").get(pk=tenant_id)))
        return quotas[tenant_id]

    scopes = {tenant_id: Scope(samples) for tenant_id, samples in live.items()}
    empty = Scope({})
    transitions = 0
    for rule in rules:
        before_state, before_count = rule.state, rule.transitions
        value = rule_value(rule, scopes.get(rule.tenant_id, empty), now_ms, stale_ms,
                           quota_percent=lambda rule=rule: quota_percent(rule.tenant_id),
                           throttled=lambda rule=rule: None if throttled is None else throttled.get(rule.tenant_id, 0.0),
                           oldest_transaction=lambda rule=rule: (oldest_transactions or {}).get(rule.tenant_id))
        notify = step(rule, value, now)
        if rule.state == before_state and notify is None:
            continue
        if notify is not None:
            rule.transitions = before_count + 1
            rule.last_notified = now
        with transaction.atomic():
            won = AlertRule.objects.filter(pk=rule.pk, state=before_state, transitions=before_count).update(
                state=rule.state, state_since=rule.state_since, transitions=rule.transitions, last_notified=rule.last_notified,
                recent=rule.recent, last_value=rule.last_value, last_evaluated=now)
            if won and notify is not None:
                _record(rule, notify, before_state, value, now)
                transitions += 1
    _save_evaluations(rules)
    return {"rules": len(rules), "transitions": transitions}


def _save_evaluations(rules: list[AlertRule]) -> None:
    """Every rule's last evaluations, value and time: one statement run for many rows (a bulk_update's CASE
    expressions cost more than the evaluation itself)."""
    from django.db import connection, transaction

    table = AlertRule._meta.db_table
    rows = [(json.dumps(r.recent), r.last_value, r.last_evaluated, r.pk) for r in rules]
    with transaction.atomic(), connection.cursor() as cursor:  # one commit, not one per row
        cursor.executemany(f"UPDATE {table} SET recent = %s, last_value = %s, last_evaluated = %s WHERE id = %s", rows)


def _backoff_s(attempt: int) -> float:
    return min(MAX_RETRY_S, FIRST_RETRY_S * 2 ** (attempt - 1))


def attempt(delivery: Delivery) -> None:
    """One attempt at a delivery (its row locked by the caller): sent, or scheduled again, or given up."""
    from tideway_server.alerts.secrets import unseal
    from tideway_server.alerts.webhooks import Outcome, post, send_email

    channel = delivery.channel
    started = time.perf_counter()
    if channel.kind == NotificationChannel.WEBHOOK:
        secrets = [s for s in (unseal(token) for token in channel.secrets) if s]
        if secrets:
            outcome = post(channel.url, secrets, delivery.message_id, delivery.payload)
        else:  # sealed under another signing key: never send unsigned
            outcome = Outcome(False, error="the channel's signing secret cannot be read (the deployment's signing key "
                                           "changed?): rotate the secret", give_up=True)
    else:
        outcome = send_email(channel.email, delivery.payload)
    now = datetime.now(UTC)
    delivery.attempts = list(delivery.attempts) + [{
        "at": now.isoformat().replace("+00:00", "Z"), "status_code": outcome.status_code, "ok": outcome.ok,
        "error": outcome.error, "duration_ms": round((time.perf_counter() - started) * 1000, 1)}]
    if outcome.ok:
        delivery.status, delivery.next_attempt = Delivery.DELIVERED, None
    elif outcome.give_up or len(delivery.attempts) >= MAX_ATTEMPTS:
        delivery.status, delivery.next_attempt = Delivery.FAILED, None
    else:
        wait = outcome.retry_after_s if outcome.retry_after_s is not None else _backoff_s(len(delivery.attempts))
        delivery.next_attempt = now + timedelta(seconds=min(wait, MAX_RETRY_S))
    delivery.save(update_fields=["attempts", "status", "next_attempt"])


def send_due(limit: int = 100) -> int:
    """Attempt every delivery that is due (oldest first), each under its row's lock: two senders never send one
    delivery at once. Returns the number attempted."""
    from django.db import transaction

    now = datetime.now(UTC)
    due = list(Delivery.objects.filter(status=Delivery.PENDING, next_attempt__lte=now).order_by("next_attempt")
               .values_list("pk", flat=True)[:limit])
    sent = 0
    for pk in due:
        with transaction.atomic():
            delivery = Delivery.objects.select_for_update(skip_locked=True).select_related("channel").filter(
                pk=pk, status=Delivery.PENDING).first()
            if delivery is None:
                continue
            attempt(delivery)
            sent += 1
    Delivery.objects.filter(created__lt=now - timedelta(days=KEEP_DELIVERIES_DAYS)).delete()
    return sent
