"""Who is calling, for which tenant, with which scopes: the result of authentication."""

from __future__ import annotations

from dataclasses import dataclass

from tideway_server.brokers.security.acl import names_match


@dataclass(frozen=True)
class Principal:
    """An authenticated caller.

    An API key acts for its tenant with its scopes on queue names matching its
    patterns. A member (signed in user) acts for one tenant with the scopes of
    their role. An operator (staff user) may act on operator endpoints and, when
    they name a tenant, for it with every scope.
    """

    tenant: object | None  # tenants.models.Tenant
    scopes: frozenset[str]
    actor: str  # for the audit log
    queue_patterns: tuple[str, ...] = ("*",)
    api_key: object | None = None  # tenants.models.ApiKey
    user: object | None = None
    role: str = ""
    operator: bool = False

    # DRF treats request.user as the user: answer the questions it asks.
    is_authenticated = True
    is_active = True

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def may_touch(self, queue_name: str) -> bool:
        """True when this caller's queue patterns cover ``queue_name`` (the rule brokers apply too: brokers.security.acl)."""
        return names_match(self.queue_patterns, queue_name)
