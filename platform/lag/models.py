"""What the ``consumer_lag`` job keeps: rollups of the lag samples and each group's status.

Rollups per group and partition (``partition`` -1: the whole group, its lag summed over partitions and its
lag in seconds the largest) at three granularities: minutes (kept 90 days), hours and days.
"""

from django.db import models


class LagRollup(models.Model):
    MINUTE, HOUR, DAY = "minute", "hour", "day"
    GRANULARITIES = [(MINUTE, "minute"), (HOUR, "hour"), (DAY, "day")]

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="lag_rollups")
    queue = models.CharField(max_length=200)
    group = models.CharField(max_length=255)
    kind = models.CharField(max_length=10)  # stream | queue
    partition = models.IntegerField()  # -1: the whole group
    granularity = models.CharField(max_length=10, choices=GRANULARITIES)
    start = models.DateTimeField()
    samples = models.IntegerField()
    lag_max = models.BigIntegerField()
    lag_mean = models.FloatField()
    lag_p95 = models.FloatField()
    lag_ms_max = models.BigIntegerField()
    lag_ms_mean = models.FloatField()
    lag_ms_p95 = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["tenant", "queue", "group", "granularity", "start"])]
        constraints = [models.UniqueConstraint(fields=["tenant", "queue", "kind", "group", "partition", "granularity", "start"],
                                               name="one_lag_rollup_per_slot")]


class LagStatus(models.Model):
    """A group's state over the job's last window (docs/analytics.md, "Lag status")."""

    OK, WARNING, ERROR, STALLED, STOPPED = "OK", "WARNING", "ERROR", "STALLED", "STOPPED"
    ORDER = [OK, WARNING, ERROR, STALLED, STOPPED]  # worse to the right: a group is its worst partition

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="lag_statuses")
    queue = models.CharField(max_length=200)
    group = models.CharField(max_length=255)
    kind = models.CharField(max_length=10)
    status = models.CharField(max_length=10)
    partitions = models.JSONField(default=list)  # [{"partition", "status", "lag", "lag_ms", "drain_s"}]
    lag = models.BigIntegerField()
    lag_ms = models.BigIntegerField()
    produce_rate = models.FloatField()
    consume_rate = models.FloatField()
    drain_s = models.FloatField(null=True)  # None: no lag, or falling behind
    falling_behind = models.BooleanField(default=False)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "queue", "kind", "group"], name="one_lag_status_per_group")]
