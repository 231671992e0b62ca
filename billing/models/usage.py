from django.db import models


class UsageRollup(models.Model):
    """What a tenant used of one metric on one queue in one hour or day (UTC), from the brokers' metering.

    Written by the ``usage_billing`` Spark job, which replaces a period's rows in one transaction (a rerun
    gives the same rows). ``queue`` is "" for figures that belong to no queue (requests).
    """

    HOUR, DAY = "hour", "day"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="usage")
    period = models.CharField(max_length=7)  # "2026-11": the month the figure was reported in
    granularity = models.CharField(max_length=4, choices=[(HOUR, HOUR), (DAY, DAY)])
    start = models.DateTimeField()
    queue = models.CharField(max_length=200, blank=True, default="")
    metric = models.CharField(max_length=40)
    value = models.BigIntegerField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "granularity", "start", "queue", "metric"],
                                               name="one_usage_figure")]
        indexes = [models.Index(fields=["tenant", "granularity", "start"]), models.Index(fields=["period"])]
        ordering = ["tenant_id", "granularity", "start", "queue", "metric"]


class UsageRun(models.Model):
    """One run of the ``usage_billing`` job: the exact ``__usage`` offsets it read and what it wrote."""

    period = models.CharField(max_length=7)
    started = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True)
    manifest = models.JSONField(default=dict)  # cluster -> {"partition": [start, end]} of __usage
    records = models.BigIntegerField(default=0)  # usage records read (the manifest's ranges, copies included)
    rows = models.IntegerField(default=0)  # rollup rows written
    digest = models.CharField(max_length=64, blank=True, default="")  # sha256 of the rows, to compare runs

    class Meta:
        ordering = ["-started"]
