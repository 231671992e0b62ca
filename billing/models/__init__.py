from billing.models.invoices import Invoice, InvoiceLine, PriceBook
from billing.models.plans import Plan
from billing.models.usage import UsageRollup, UsageRun

__all__ = ["Invoice", "InvoiceLine", "Plan", "PriceBook", "UsageRollup", "UsageRun"]
