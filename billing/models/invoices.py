from django.db import models


class PriceBook(models.Model):
    """A version of the prices. The book in effect at a period's start prices that period; a new version never
    changes an invoice already priced (its lines name the version)."""

    version = models.PositiveIntegerField(unique=True)
    effective_from = models.DateField()
    currency = models.CharField(max_length=3, default="USD")
    # metric -> {"unit": "GiB", "divisor": 1073741824, "free": {"plan name": units, ...}, "tiers": [[up_to units
    # or null, cents per unit], ...]}; a metric not listed is not charged.
    prices = models.JSONField()

    class Meta:
        ordering = ["-effective_from", "-version"]

    def __str__(self) -> str:
        return f"price book v{self.version} from {self.effective_from}"


class Invoice(models.Model):
    """A tenant's invoice for one month: a draft while the month is open, final after; a final invoice never changes
    (usage reported late lands as a correction line on the next invoice)."""

    DRAFT, FINAL = "draft", "final"

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="invoices")
    period = models.CharField(max_length=7)  # "2026-11"
    status = models.CharField(max_length=5, choices=[(DRAFT, DRAFT), (FINAL, FINAL)], default=DRAFT)
    currency = models.CharField(max_length=3, default="USD")
    price_book_version = models.PositiveIntegerField()
    total_cents = models.BigIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)
    finalized_at = models.DateTimeField(null=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "period"], name="one_invoice_per_tenant_period")]
        ordering = ["-period", "tenant_id"]


class InvoiceLine(models.Model):
    """One charge: the plan's fee, a metric's usage, or a correction for a period already invoiced."""

    PLAN, USAGE, CORRECTION = "plan", "usage", "correction"

    invoice = models.ForeignKey(Invoice, on_delete=models.CASCADE, related_name="lines")
    kind = models.CharField(max_length=10, choices=[(PLAN, PLAN), (USAGE, USAGE), (CORRECTION, CORRECTION)])
    metric = models.CharField(max_length=40, blank=True, default="")
    usage_period = models.CharField(max_length=7)  # the month the usage belongs to (a correction names an earlier one)
    quantity = models.BigIntegerField(default=0)  # in the metric's raw unit (bytes, messages, byte-seconds, ...)
    units = models.DecimalField(max_digits=24, decimal_places=6, default=0)  # in the price book's unit
    unit = models.CharField(max_length=30, blank=True, default="")
    amount_cents = models.BigIntegerField()
    description = models.CharField(max_length=200)

    class Meta:
        ordering = ["id"]
