"""Alert rules per tenant, the channels they notify, what happened (events) and every delivery attempt.

A rule's state changes only in ``alerts.evaluate`` (one transaction per rule, the row locked): the new state,
the event and one delivery per channel are written together, so a transition is notified once however the
workers die (the deliveries are the outbox ``alerts.deliver`` sends from).
"""

from django.db import models

METRICS = {
    "lag": "lag in messages", "lag_seconds": "lag in seconds", "oldest_unacked_seconds": "age of the oldest "
    "unacknowledged message (queue groups)", "dead_letters": "dead-letter depth (queue groups)",
    "publish_rate": "publish rate (messages/s)", "consume_rate": "consume rate (messages/s)",
    "quota_use": "quota use (the highest, percent)",
    "throttled": "times the plan's rate limits held the tenant back (the last minute or two)",
    "oldest_transaction_seconds": "age of the oldest open transaction (seconds; a hung one holds read_committed "
    "readers back)",
}
COMPARATORS = {">": lambda v, t: v > t, ">=": lambda v, t: v >= t, "<": lambda v, t: v < t, "<=": lambda v, t: v <= t}
MISSING_DATA = ("insufficient_data", "breaching", "not_breaching", "keep_last")  # the default first


class NotificationChannel(models.Model):
    WEBHOOK, EMAIL = "webhook", "email"
    KINDS = [(WEBHOOK, "webhook"), (EMAIL, "email")]

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="notification_channels")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=KINDS)
    url = models.URLField(max_length=2000, blank=True)
    email = models.EmailField(blank=True)
    # Webhook signing secrets, encrypted (alerts/secrets.py): the newest first; two during a rotation.
    secrets = models.JSONField(default=list)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_channel_name_per_tenant")]


class AlertRule(models.Model):
    OK, PENDING, FIRING, INSUFFICIENT_DATA = "OK", "PENDING", "FIRING", "INSUFFICIENT_DATA"
    STATES = [(s, s) for s in (OK, PENDING, FIRING, INSUFFICIENT_DATA)]

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="alert_rules")
    name = models.CharField(max_length=100)
    metric = models.CharField(max_length=30, choices=[(k, v) for k, v in METRICS.items()])
    queue = models.CharField(max_length=100, blank=True)  # "": every queue
    group = models.CharField(max_length=100, blank=True)  # "": every group (of the queue, or of every queue)
    comparator = models.CharField(max_length=2, default=">")
    threshold = models.FloatField()
    recovery_threshold = models.FloatField()  # back to OK only once the value is past this (on the safe side)
    pending_m = models.PositiveIntegerField(default=1)  # breaching in M ...
    pending_n = models.PositiveIntegerField(default=1)  # ... of the last N evaluations
    missing_data = models.CharField(max_length=20, default="insufficient_data")
    repeat_interval_s = models.PositiveIntegerField(default=0)  # 0: no reminders while firing
    channels = models.ManyToManyField(NotificationChannel, blank=True, related_name="rules")
    enabled = models.BooleanField(default=True)
    silenced_until = models.DateTimeField(null=True, blank=True)
    # Evaluation state
    state = models.CharField(max_length=20, choices=STATES, default=OK)
    state_since = models.DateTimeField(null=True)
    recent = models.JSONField(default=list)  # the last N evaluations: true (breaching) / false
    last_value = models.FloatField(null=True)
    last_evaluated = models.DateTimeField(null=True)
    last_notified = models.DateTimeField(null=True)
    transitions = models.PositiveIntegerField(default=0)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_rule_name_per_tenant")]


class AlertEvent(models.Model):
    """A transition (or a reminder) of a rule: what it was, what it became, the value that made it."""

    rule = models.ForeignKey(AlertRule, on_delete=models.CASCADE, related_name="events")
    sequence = models.PositiveIntegerField()  # the rule's transition number: one event per number
    kind = models.CharField(max_length=10)  # firing | resolved | reminder | test
    from_state = models.CharField(max_length=20)
    to_state = models.CharField(max_length=20)
    value = models.FloatField(null=True)
    at = models.DateTimeField()
    silenced = models.BooleanField(default=False)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["rule", "sequence"], name="one_event_per_transition")]
        ordering = ["-at"]


class Delivery(models.Model):
    """One notification of an event to one channel, with every attempt (kept 90 days)."""

    PENDING, DELIVERED, FAILED = "pending", "delivered", "failed"

    event = models.ForeignKey(AlertEvent, on_delete=models.CASCADE, related_name="deliveries", null=True)
    channel = models.ForeignKey(NotificationChannel, on_delete=models.CASCADE, related_name="deliveries")
    message_id = models.CharField(max_length=64, unique=True)  # the webhook-id: the same on every retry
    payload = models.JSONField()
    status = models.CharField(max_length=10, default=PENDING)
    attempts = models.JSONField(default=list)  # [{"at", "status_code", "error", "duration_ms"}]
    next_attempt = models.DateTimeField(null=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["status", "next_attempt"])]
        ordering = ["-created"]
