"""Authorisation: the tenant a caller acts for, and the scope each method needs.

Views say what they need with class attributes:

* ``required_scopes``: HTTP method -> scope ("produce", "consume", "manage")
  or ``ANY_SCOPE``. The default: reads need any scope, writes need "manage".
* ``operator_only``: only staff users (operators) may call it.
* ``tenant_required`` (default True): the caller must act for a tenant.
* ``members_admin``: writes also need the owner or admin role when the caller
  is a signed-in member (an API key with "manage" acts as an admin).
"""

from __future__ import annotations

from rest_framework import exceptions, permissions

ANY_SCOPE = "any"
READ_METHODS = ("GET", "HEAD", "OPTIONS")


def required_scope(view, method: str) -> str:
    """The scope ``view`` needs for ``method`` (ANY_SCOPE for reads unless the view says otherwise)."""
    declared = getattr(view, "required_scopes", {}) or {}
    if method in declared:
        return declared[method]
    if method == "HEAD" and "GET" in declared:
        return declared["GET"]
    return ANY_SCOPE if method in READ_METHODS else "manage"


class TenantScopePermission(permissions.BasePermission):
    """Refuses callers without a tenant or without the scope the method needs (403, code forbidden)."""

    def has_permission(self, request, view) -> bool:
        if getattr(view, "public", False):
            return True
        principal = request.auth
        if principal is None:
            raise exceptions.NotAuthenticated("authenticate with 'Authorization: Bearer <API key>'")
        if getattr(view, "operator_only", False):
            if not principal.operator:
                raise exceptions.PermissionDenied("only operators may call this endpoint")
            return True
        if getattr(view, "tenant_required", True) and principal.tenant is None:
            raise exceptions.PermissionDenied("name a tenant in the X-Tideway-Tenant header to act for it")
        scope = required_scope(view, request.method)
        if scope == ANY_SCOPE:
            allowed = bool(principal.scopes) or bool(principal.role)
        else:
            allowed = principal.has_scope(scope)
        if not allowed:
            raise exceptions.PermissionDenied(
                f"this {'API key' if principal.api_key else 'role'} lacks the '{scope}' scope needed to {request.method} here"
                if scope != ANY_SCOPE else "this API key has no scope"
            )
        if getattr(view, "members_admin", False) and request.method not in READ_METHODS and principal.user is not None:
            from tideway_server.tenants.choices import MEMBER_MANAGERS

            if principal.role not in MEMBER_MANAGERS and not principal.operator:
                raise exceptions.PermissionDenied("only owners and admins may change members and keys")
        return True
