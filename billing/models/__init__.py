from billing.models.plans import Plan

__all__ = ["Plan"]
