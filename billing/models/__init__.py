from billing.models.plans import Plan
from billing.models.usage import UsageRollup, UsageRun

__all__ = ["Plan", "UsageRollup", "UsageRun"]
