"""Who is using the console, and for which tenant: the same Principal the API builds for a signed-in member.

A member of several tenants picks one with the tenant switcher (kept in the
session); scopes come from the role (``tenants.choices.ROLE_SCOPES``), so a
viewer may look and not touch, in the console exactly as in the API. Staff
users (operators) act for a tenant they pick, with every scope, as in the API.
"""

from __future__ import annotations

from functools import wraps

from django.shortcuts import redirect
from tideway_server.controlplane.api.principal import Principal
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants.choices import ALL_SCOPES, ROLE_SCOPES
from tideway_server.webui.render import error_page, forbidden, sentence

SESSION_TENANT = "console_tenant"


def memberships(user):
    from tideway_server.tenants.models import Membership

    return Membership.objects.select_related("tenant", "tenant__plan").filter(user=user).order_by("tenant__name")


def console_principal(request) -> Principal | None:
    """The signed-in user acting for the session's tenant (their first one by default); None if none."""
    from tideway_server.tenants.models import Tenant

    user = request.user
    if not user.is_authenticated or not user.is_active:
        return None
    wanted = request.session.get(SESSION_TENANT)
    if user.is_staff and wanted:
        tenant = Tenant.objects.select_related("plan").filter(slug=wanted).first()
        if tenant is not None:
            return Principal(tenant=tenant, scopes=ALL_SCOPES, actor=f"operator:{user.username}", user=user,
                             role="owner", operator=True)
    rows = [m for m in memberships(user) if m.tenant.suspended_at is None]  # a suspended tenant is closed to its members
    chosen = next((m for m in rows if m.tenant.slug == wanted), rows[0] if rows else None)
    if chosen is None:
        return None
    return Principal(tenant=chosen.tenant, scopes=ROLE_SCOPES[chosen.role], actor=f"user:{user.username}", user=user,
                     role=chosen.role)


def may_manage_members(principal: Principal) -> bool:
    """Owners and admins (and operators) change members and API keys, as in the API (``members_admin``)."""
    from tideway_server.tenants.choices import MEMBER_MANAGERS

    return principal.operator or principal.role in MEMBER_MANAGERS


def member_page(scope: str | None = None, *, managers_only: bool = False):
    """A console view for a signed-in member acting for a tenant; ``scope`` (e.g. "manage") needed to use it.

    The view gets ``request.principal``. Without a tenant the user is sent to sign in (or told they belong to
    none); without the scope the answer is 403, whatever the page would have shown. ``managers_only``: writes
    (POST) also need the owner or admin role.
    """

    def decorate(view):
        @wraps(view)
        def wrapped(request, *args, **kwargs):
            if not request.user.is_authenticated:
                return redirect(f"/console/signin?next={request.path}")
            principal = console_principal(request)
            if principal is None:
                if request.user.is_staff:  # an operator acting for no tenant yet: the tenants page, to pick one
                    return redirect("/console/operator/tenants")
                if memberships(request.user).exists():
                    return forbidden(request, "Your tenant is suspended: ask the operators.")
                return forbidden(request, "You are not a member of any tenant yet: ask an owner to invite you.")
            request.principal = principal  # (the error pages show the navigation too)
            if scope is not None and not principal.has_scope(scope):
                return forbidden(request, f"Your role ({principal.role}) may not do this: it needs the "
                                          f"'{scope}' scope. Ask an owner or admin of the tenant.")
            if managers_only and request.method == "POST" and not may_manage_members(principal):
                return forbidden(request, "Only owners and admins may change members and keys.")
            try:
                return view(request, *args, **kwargs)
            except ActionError as exc:  # e.g. the queue's cluster has no live broker: a page that says so, not a 500
                return error_page(request, exc.status, sentence(exc.message))

        return wrapped

    return decorate
