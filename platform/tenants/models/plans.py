from django.db import models

GIB = 1 << 30
MIB = 1 << 20
DAY_MS = 24 * 3600 * 1000


class Plan(models.Model):
    """A plan a tenant subscribes to: the quotas it grants, and its monthly list price.

    A control-plane record (billing prices usage against it, and reads it; the
    control plane never reads billing). Its table keeps the name it had when
    plans lived in billing (``billing_plan``).

    Creation quotas (queues, partitions, storage, message size, retention) are
    checked when a queue is created or changed (topics.quotas); rate quotas
    (bytes/s in and out, requests/s) are token buckets on the data path.
    Storage is reserved, not measured: a queue reserves its retention size per
    partition times its partitions.
    """

    name = models.SlugField(max_length=50, unique=True)
    display_name = models.CharField(max_length=100)
    max_queues = models.PositiveIntegerField()
    max_partitions = models.PositiveIntegerField()  # summed over all queues of the tenant
    max_storage_bytes = models.BigIntegerField()
    max_publish_bytes_per_s = models.BigIntegerField()
    max_consume_bytes_per_s = models.BigIntegerField()
    max_requests_per_s = models.PositiveIntegerField()
    max_message_bytes = models.PositiveIntegerField()
    max_retention_ms = models.BigIntegerField()
    # Connections one API key may hold open to one broker (native clients; brokers learn it with the key).
    max_connections_per_key = models.PositiveIntegerField(default=100)
    monthly_price_cents = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "billing_plan"
        ordering = ["monthly_price_cents", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def default_retention_bytes(self) -> int:
        """A queue's per-partition retention size when none is asked for: a fair share of storage."""
        return max(self.max_storage_bytes // max(self.max_partitions, 1), 1)


# Connections per key and broker of the plans every deployment starts with (migration 0005 sets them; the field's
# default is the team plan's).
CONNECTIONS_PER_KEY = {"free": 20, "team": 100, "business": 500, "enterprise": 1_000}

# The plans every deployment starts with (a data migration creates them).
DEFAULT_PLANS = [
    dict(name="free", display_name="Free", max_queues=5, max_partitions=10, max_storage_bytes=1 * GIB,
         max_publish_bytes_per_s=1 * MIB, max_consume_bytes_per_s=2 * MIB, max_requests_per_s=50,
         max_message_bytes=256 * 1024, max_retention_ms=7 * DAY_MS, monthly_price_cents=0),
    dict(name="team", display_name="Team", max_queues=50, max_partitions=200, max_storage_bytes=100 * GIB,
         max_publish_bytes_per_s=20 * MIB, max_consume_bytes_per_s=40 * MIB, max_requests_per_s=1_000,
         max_message_bytes=1 * MIB, max_retention_ms=30 * DAY_MS, monthly_price_cents=4_900),
    dict(name="business", display_name="Business", max_queues=500, max_partitions=2_000, max_storage_bytes=2_000 * GIB,
         max_publish_bytes_per_s=200 * MIB, max_consume_bytes_per_s=400 * MIB, max_requests_per_s=10_000,
         max_message_bytes=8 * MIB, max_retention_ms=90 * DAY_MS, monthly_price_cents=49_900),
    # Thousands of queues per tenant (issue 20's scale): usage is billed from the first byte (no allowance).
    dict(name="enterprise", display_name="Enterprise", max_queues=5_000, max_partitions=20_000,
         max_storage_bytes=20_000 * GIB, max_publish_bytes_per_s=1_000 * MIB, max_consume_bytes_per_s=2_000 * MIB,
         max_requests_per_s=100_000, max_message_bytes=8 * MIB, max_retention_ms=365 * DAY_MS,
         monthly_price_cents=249_900),
]
