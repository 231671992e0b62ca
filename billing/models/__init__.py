from billing.models.invoices import Invoice, InvoiceLine, PriceBook
from billing.models.usage import UsageRollup, UsageRun

__all__ = ["Invoice", "InvoiceLine", "PriceBook", "UsageRollup", "UsageRun"]
