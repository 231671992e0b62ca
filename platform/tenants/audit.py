"""Appending to the audit log (inside the action's transaction, so both land or neither)."""

from __future__ import annotations

from tideway_server.tenants.models import AuditEntry


def record(tenant, actor: str, action: str, target: str = "", **details) -> AuditEntry:
    return AuditEntry.objects.create(
        tenant=tenant, tenant_slug=tenant.slug if tenant else "", actor=actor, action=action, target=target, details=details
    )
