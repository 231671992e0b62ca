from tenants.models.api_keys import ApiKey
from tenants.models.audit import AuditEntry
from tenants.models.members import Membership
from tenants.models.plans import Plan
from tenants.models.tenants import Tenant

__all__ = ["ApiKey", "AuditEntry", "Membership", "Plan", "Tenant"]
