from tideway_server.billing.models.invoices import Invoice, InvoiceLine, PriceBook
from tideway_server.billing.models.usage import UsageRollup, UsageRun

__all__ = ["Invoice", "InvoiceLine", "PriceBook", "UsageRollup", "UsageRun"]
