from tideway_server.tenants.models.api_keys import ApiKey
from tideway_server.tenants.models.audit import AuditEntry
from tideway_server.tenants.models.invitations import Invitation
from tideway_server.tenants.models.members import Membership
from tideway_server.tenants.models.plans import Plan
from tideway_server.tenants.models.tenants import Tenant

__all__ = ["ApiKey", "AuditEntry", "Invitation", "Membership", "Plan", "Tenant"]
