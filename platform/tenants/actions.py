"""Every change to tenants, members and API keys: one ``do_*`` function each.

Each runs in one transaction with an audit row; ``acting`` is the actor
string of the caller (see tenants.models.AuditEntry).
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants import audit
from tideway_server.tenants.choices import ALL_SCOPES, Role
from tideway_server.tenants.keys import new_key
from tideway_server.tenants.models import ApiKey, Membership, Plan, Tenant

_SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,48}[a-z0-9]?$")


def _plan(name: str) -> Plan:
    plan = Plan.objects.filter(name=name).first()
    if plan is None:
        known = ", ".join(Plan.objects.values_list("name", flat=True))
        raise ActionError("unknown_plan", f"plan {name!r} does not exist (plans: {known})")
    return plan


def do_create_tenant(name: str, *, plan_name: str = "free", slug: str | None = None, region: str = "local",
                     acting: str) -> Tenant:
    slug = slug or slugify(name)[:50].strip("-")
    if not slug or not _SLUG.match(slug):
        raise ActionError("invalid_tenant_name", f"cannot make a tenant id from {name!r}: use letters, digits and '-'")
    plan = _plan(plan_name)
    try:
        with transaction.atomic():
            tenant = Tenant.objects.create(name=name, slug=slug, plan=plan, region=region)
            audit.record(tenant, acting, "tenant.create", slug, plan=plan.name, region=region)
    except IntegrityError:
        raise ActionError("tenant_exists", f"a tenant with id {slug!r} already exists") from None
    return tenant


def do_change_plan(tenant: Tenant, plan_name: str, *, acting: str) -> Tenant:
    plan = _plan(plan_name)
    with transaction.atomic():
        old = tenant.plan.name
        tenant.plan = plan
        tenant.save(update_fields=["plan"])
        audit.record(tenant, acting, "tenant.change_plan", tenant.slug, old=old, new=plan.name)
    return tenant


def do_signup(*, username: str, password: str, email: str, tenant_name: str) -> tuple[object, Tenant]:
    """A new user and their tenant on the free plan, with the user as owner."""
    User = get_user_model()
    with transaction.atomic():
        if User.objects.filter(username=username).exists():
            raise ActionError("username_taken", f"the user name {username!r} is taken")
        user = User.objects.create_user(username=username, email=email, password=password)
        tenant = do_create_tenant(tenant_name, acting=f"user:{username}")
        Membership.objects.create(user=user, tenant=tenant, role=Role.OWNER)
        audit.record(tenant, f"user:{username}", "member.add", username, role=Role.OWNER)
    return user, tenant


def do_suspend_tenant(tenant: Tenant, suspended: bool, *, acting: str) -> Tenant:
    """Suspend (or resume) a tenant: its keys and members are refused everywhere while it is suspended."""
    with transaction.atomic():
        if (tenant.suspended_at is not None) != suspended:
            tenant.suspended_at = timezone.now() if suspended else None
            tenant.save(update_fields=["suspended_at"])
            audit.record(tenant, acting, "tenant.suspend" if suspended else "tenant.resume", tenant.slug)
    return tenant


def do_set_message_export(tenant: Tenant, enabled: bool, *, acting: str) -> Tenant:
    """Allow or forbid downloading messages from the console, for the whole tenant."""
    with transaction.atomic():
        if tenant.message_export != enabled:
            tenant.message_export = enabled
            tenant.save(update_fields=["message_export"])
            audit.record(tenant, acting, "tenant.message_export", tenant.slug, enabled=enabled)
    return tenant


def do_create_api_key(tenant: Tenant, *, name: str, scopes: list[str], queue_patterns: list[str] | None = None,
                      expires_at=None, acting: str) -> tuple[ApiKey, str]:
    """A new key; returns the row and the full key string, which is never shown again. ``expires_at``: refused
    from then on (None: until revoked)."""
    unknown = sorted(set(scopes) - ALL_SCOPES)
    if unknown or not scopes:
        raise ActionError("invalid_scopes", "a key needs at least one scope, from "
                          f"{', '.join(sorted(ALL_SCOPES))}" + (f" ({', '.join(unknown)} is none)" if unknown else ""),
                          details={"field": "scopes"})
    if expires_at is not None and expires_at <= timezone.now():
        raise ActionError("invalid_request", "a key's expiry is in the future", details={"field": "expires_at"})
    key, prefix, secret_sha256 = new_key()
    with transaction.atomic():
        row = ApiKey.objects.create(tenant=tenant, name=name, prefix=prefix, secret_sha256=secret_sha256,
                                    scopes=sorted(set(scopes)), queue_patterns=list(queue_patterns or ["*"]),
                                    expires_at=expires_at, created_by=acting)
        audit.record(tenant, acting, "api_key.create", prefix, name=name, scopes=row.scopes, queue_patterns=row.queue_patterns,
                     expires_at=expires_at.isoformat() if expires_at else None)
    return row, key


ROTATION_GRACE_MAX_S = 30 * 86400


def do_rotate_api_key(key: ApiKey, *, grace_s: int, acting: str) -> tuple[ApiKey, str]:
    """A new key with the old one's name, scopes and patterns (and no expiry); the old key keeps working ``grace_s``
    seconds more (0: stops now), time to deploy the new one. Returns the new row and its key (shown once)."""
    refusal = key.refusal(timezone.now())
    if refusal is not None:
        raise ActionError("invalid_request", f"{refusal}: create a new key instead")
    if not 0 <= grace_s <= ROTATION_GRACE_MAX_S:
        raise ActionError("invalid_request", "the old key keeps working from 0 seconds to 30 days",
                          details={"field": "grace_s"})
    with transaction.atomic():
        old = ApiKey.objects.select_for_update().get(pk=key.pk)
        until = timezone.now() + timedelta(seconds=grace_s)
        new_row, secret = do_create_api_key(old.tenant, name=old.name, scopes=old.scopes, queue_patterns=old.queue_patterns,
                                            acting=acting)
        old.expires_at = min(until, old.expires_at) if old.expires_at else until
        old.save(update_fields=["expires_at"])
        audit.record(old.tenant, acting, "api_key.rotate", old.prefix, name=old.name, replaced_by=new_row.prefix,
                     old_key_stops=old.expires_at.isoformat())
    return new_row, secret


def do_revoke_api_key(key: ApiKey, *, acting: str) -> ApiKey:
    with transaction.atomic():
        if key.revoked_at is None:
            key.revoked_at = timezone.now()
            key.save(update_fields=["revoked_at"])
            audit.record(key.tenant, acting, "api_key.revoke", key.prefix, name=key.name)
    return key


def do_issue_aws_credentials(key: ApiKey, *, acting: str) -> tuple[str, str]:
    """AWS credentials acting as ``key`` on the SQS endpoint: (access key id, secret access key), the secret shown
    only now. Issuing them again replaces them (the previous secret stops working)."""
    import secrets

    from tideway_server.tenants.aws_credentials import access_key_id, secret_access_key

    refusal = key.refusal(timezone.now())
    if refusal is not None:
        raise ActionError("invalid_request", f"{refusal}: AWS credentials act as a live key")
    with transaction.atomic():
        replaced = bool(key.aws_credentials_salt)
        key.aws_credentials_salt = secrets.token_hex(16)
        key.save(update_fields=["aws_credentials_salt"])
        audit.record(key.tenant, acting, "api_key.aws_credentials", key.prefix, name=key.name, replaced=replaced)
    return access_key_id(key.prefix), secret_access_key(key.prefix, key.aws_credentials_salt)


def do_revoke_aws_credentials(key: ApiKey, *, acting: str) -> ApiKey:
    with transaction.atomic():
        if key.aws_credentials_salt:
            key.aws_credentials_salt = ""
            key.save(update_fields=["aws_credentials_salt"])
            audit.record(key.tenant, acting, "api_key.aws_credentials_revoke", key.prefix, name=key.name)
    return key


def do_add_member(tenant: Tenant, *, username: str, role: str, password: str | None = None, email: str = "",
                  acting: str) -> Membership:
    """Add a user (created when ``password`` is given and the user is new) to the tenant."""
    User = get_user_model()
    with transaction.atomic():
        user = User.objects.filter(username=username).first()
        if user is None:
            if not password:
                raise ActionError("unknown_user", f"user {username!r} does not exist; give a password to create them")
            user = User.objects.create_user(username=username, email=email, password=password)
        if Membership.objects.filter(user=user, tenant=tenant).exists():
            raise ActionError("member_exists", f"{username!r} is already a member")
        membership = Membership.objects.create(user=user, tenant=tenant, role=role)
        audit.record(tenant, acting, "member.add", username, role=role)
    return membership


def do_change_role(membership: Membership, role: str, *, acting: str) -> Membership:
    with transaction.atomic():
        _keep_an_owner(membership, new_role=role)
        old, membership.role = membership.role, role
        membership.save(update_fields=["role"])
        audit.record(membership.tenant, acting, "member.change_role", membership.user.username, old=old, new=role)
    return membership


def do_remove_member(membership: Membership, *, acting: str) -> None:
    with transaction.atomic():
        _keep_an_owner(membership, new_role=None)
        membership.delete()
        audit.record(membership.tenant, acting, "member.remove", membership.user.username)


def _keep_an_owner(membership: Membership, new_role: str | None) -> None:
    if membership.role != Role.OWNER or new_role == Role.OWNER:
        return
    owners = Membership.objects.select_for_update().filter(tenant=membership.tenant, role=Role.OWNER).count()
    if owners <= 1:
        raise ActionError("last_owner", "a tenant keeps at least one owner: make someone else owner first")
