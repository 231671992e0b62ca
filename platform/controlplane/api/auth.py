"""Authentication of API calls: API keys (Bearer, or as a Basic password) and members.

Every class returns ``(principal, principal)`` so views read one object,
``request.auth``, whatever the credential was.
"""

from __future__ import annotations

import base64
from datetime import timedelta

from django.contrib.auth import authenticate
from django.utils import timezone
from rest_framework import authentication, exceptions
from tideway_server.controlplane.api.principal import Principal
from tideway_server.tenants.choices import ALL_SCOPES, ROLE_SCOPES
from tideway_server.tenants.keys import KEY_PREFIX, secret_matches, split_key

TENANT_HEADER = "HTTP_X_TIDEWAY_TENANT"  # X-Tideway-Tenant: which tenant a member or operator acts for
LAST_USED_WRITE_INTERVAL = timedelta(minutes=1)


def _basic_credentials(request) -> tuple[str, str] | None:
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        return None
    try:
        username, sep, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        raise exceptions.AuthenticationFailed("the Basic credentials are not valid base64 'user:password'") from None
    return (username, password) if sep else None


def principal_for_key(key: str) -> Principal:
    """The principal of an API key string; AuthenticationFailed when it is not a live key."""
    from tideway_server.tenants.models import ApiKey

    parts = split_key(key)
    if parts is None:
        raise exceptions.AuthenticationFailed("the API key is malformed (expected tw_<12 hex>_<secret>)")
    prefix, secret = parts
    row = ApiKey.objects.select_related("tenant", "tenant__plan").filter(prefix=prefix).first()
    if row is None or not secret_matches(secret, row.secret_sha256):
        raise exceptions.AuthenticationFailed("the API key is not valid")
    now = timezone.now()
    if row.refusal(now) is not None:  # revoked or expired
        raise exceptions.AuthenticationFailed(row.refusal(now))
    if row.tenant.suspended_at is not None:
        raise exceptions.AuthenticationFailed(f"tenant {row.tenant.slug!r} is suspended")
    if row.last_used_at is None or now - row.last_used_at > LAST_USED_WRITE_INTERVAL:
        ApiKey.objects.filter(pk=row.pk).update(last_used_at=now)
    return Principal(
        tenant=row.tenant,
        scopes=frozenset(row.scopes),
        actor=f"key:{row.prefix}",
        queue_patterns=tuple(row.queue_patterns) or ("*",),
        api_key=row,
    )


def principal_for_user(request, user) -> Principal:
    """A signed-in user acts for the tenant named in X-Tideway-Tenant, or their only tenant."""
    from tideway_server.tenants.models import Membership, Tenant

    wanted = request.META.get(TENANT_HEADER, "").strip()
    if user.is_staff:
        tenant = Tenant.objects.select_related("plan").filter(slug=wanted).first() if wanted else None
        if wanted and tenant is None:
            raise exceptions.NotFound(f"tenant {wanted!r} does not exist")
        return Principal(tenant=tenant, scopes=ALL_SCOPES if tenant else frozenset(), actor=f"operator:{user.username}",
                         user=user, role="owner" if tenant else "", operator=True)
    memberships = Membership.objects.select_related("tenant", "tenant__plan").filter(user=user)
    if wanted:
        memberships = memberships.filter(tenant__slug=wanted)
    memberships = list(memberships[:2])
    if not memberships:
        raise exceptions.PermissionDenied("you are not a member of this tenant" if wanted else "you are not a member of any tenant")
    if len(memberships) > 1:
        raise exceptions.PermissionDenied("you are a member of several tenants: name one in the X-Tideway-Tenant header")
    membership = memberships[0]
    if membership.tenant.suspended_at is not None:
        raise exceptions.PermissionDenied(f"tenant {membership.tenant.slug!r} is suspended")
    return Principal(tenant=membership.tenant, scopes=ROLE_SCOPES[membership.role], actor=f"user:{user.username}",
                     user=user, role=membership.role)


class ApiKeyAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer tw_...`` or HTTP Basic with the key as the password (any user name).

    Basic is what Confluent's Schema Registry clients send (``basic.auth.user.info``).
    """

    def authenticate(self, request):
        header = request.META.get("HTTP_AUTHORIZATION", "")
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer":
            principal = principal_for_key(value.strip())
            return principal, principal
        basic = _basic_credentials(request)
        if basic is not None and basic[1].startswith(KEY_PREFIX):
            principal = principal_for_key(basic[1])
            return principal, principal
        return None

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="tideway"'


class MemberBasicAuthentication(authentication.BaseAuthentication):
    """HTTP Basic with a user name and password (members and operators)."""

    def authenticate(self, request):
        basic = _basic_credentials(request)
        if basic is None or basic[1].startswith(KEY_PREFIX):
            return None
        user = authenticate(request=request._request, username=basic[0], password=basic[1])
        if user is None or not user.is_active:
            raise exceptions.AuthenticationFailed("the user name or password is not valid")
        principal = principal_for_user(request, user)
        return principal, principal


class MemberSessionAuthentication(authentication.SessionAuthentication):
    """A signed-in console session (CSRF-checked, as DRF does for sessions)."""

    def authenticate(self, request):
        user = getattr(request._request, "user", None)
        if user is None or not user.is_authenticated or not user.is_active:
            return None
        self.enforce_csrf(request)
        principal = principal_for_user(request, user)
        return principal, principal
