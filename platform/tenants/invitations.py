"""Members by invitation: an owner or admin invites an e-mail address; the invitee joins through a signed link,
signed in or signing up there. The answer to an invitation never says whether the address belongs to a user."""

from __future__ import annotations

import logging
import re
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import send_mail
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.utils import timezone
from tideway_server.controlplane.errors import ActionError
from tideway_server.tenants import audit
from tideway_server.tenants.choices import PASSWORD_MIN, USERNAME_PATTERN, Role
from tideway_server.tenants.models import Invitation, Membership, Tenant

log = logging.getLogger(__name__)

INVITATION_DAYS = 7
PENDING_MAX = 100  # a tenant's open invitations at once
_SALT = "tideway.tenants.invitation"


def pending_invitations(tenant):
    """The tenant's invitations that can still be accepted, newest first."""
    return Invitation.objects.filter(tenant=tenant, accepted_at=None, cancelled_at=None, expires_at__gt=timezone.now())


def token_for(invitation: Invitation) -> str:
    """The signed part of the link: the invitation's id, signed with the site's secret (it cannot be guessed)."""
    return signing.dumps({"invitation": invitation.pk, "email": invitation.email}, salt=_SALT, compress=True)


def invitation_for(token: str) -> Invitation:
    """The pending invitation a link names; ActionError ``not_found`` for a forged, expired, used or cancelled one."""
    gone = ActionError("not_found", "this invitation link is not valid: it was used, cancelled or has expired "
                                    "(invitations last 7 days): ask for a new one")
    try:
        signed = signing.loads(token, salt=_SALT, max_age=timedelta(days=INVITATION_DAYS))
    except signing.BadSignature:
        raise gone from None
    row = Invitation.objects.select_related("tenant").filter(pk=signed.get("invitation"), email=signed.get("email")).first()
    if row is None or not row.pending(timezone.now()) or row.tenant.suspended_at is not None:
        raise gone
    return row


def do_invite(tenant: Tenant, *, email: str, role: str, acting: str, site: str) -> tuple[Invitation, str]:
    """Invite ``email`` as ``role``: the invitation and its link (also e-mailed; the console shows it to copy,
    as mail may not be set up). The same answer whether or not a user has that address."""
    try:
        validate_email(email)
    except ValidationError:
        raise ActionError("invalid_request", "the e-mail address is not one (name@example.com)",
                          details={"field": "email"}) from None
    if role not in Role.values:
        raise ActionError("invalid_request", f"the role is one of {', '.join(Role.values)}", details={"field": "role"})
    if pending_invitations(tenant).count() >= PENDING_MAX:
        raise ActionError("quota_exceeded", f"a tenant has at most {PENDING_MAX} open invitations: cancel some")
    with transaction.atomic():
        row = Invitation.objects.create(tenant=tenant, email=email.strip().lower(), role=role, invited_by=acting,
                                        expires_at=timezone.now() + timedelta(days=INVITATION_DAYS))
        audit.record(tenant, acting, "member.invite", row.email, role=role)
    link = f"{site.rstrip('/')}/console/invitations/{token_for(row)}"
    try:
        send_mail(f"You are invited to {tenant.name} on Tideway",
                  f"{acting.split(':', 1)[-1]} invites you to the tenant {tenant.name} as {role}.\n\n"
                  f"Open this link within {INVITATION_DAYS} days to accept (sign in or create an account there):\n{link}\n",
                  settings.DEFAULT_FROM_EMAIL, [row.email], fail_silently=False)
    except Exception as exc:  # noqa: BLE001 - mail may not be set up: the inviter copies the link instead
        log.info("invitation to %s not e-mailed (%s): the console shows its link", row.email, exc)
    return row, link


def do_cancel_invitation(row: Invitation, *, acting: str) -> None:
    with transaction.atomic():
        if row.cancelled_at is None and row.accepted_at is None:
            row.cancelled_at = timezone.now()
            row.save(update_fields=["cancelled_at"])
            audit.record(row.tenant, acting, "member.cancel_invitation", row.email)


def do_accept(row: Invitation, user) -> Membership:
    """``user`` (who opened the link, acting themselves) joins the tenant with the invitation's role."""
    with transaction.atomic():
        locked = Invitation.objects.select_for_update().get(pk=row.pk)
        if not locked.pending(timezone.now()):
            raise ActionError("not_found", "this invitation was used or cancelled meanwhile")
        membership = Membership.objects.filter(user=user, tenant=row.tenant).first()
        if membership is None:
            membership = Membership.objects.create(user=user, tenant=row.tenant, role=row.role)
        locked.accepted_at, locked.accepted_by = timezone.now(), user
        locked.save(update_fields=["accepted_at", "accepted_by"])
        audit.record(row.tenant, f"user:{user.username}", "member.join", user.username, role=membership.role,
                     invited_by=row.invited_by)
    return membership


def do_sign_up_and_accept(row: Invitation, *, username: str, password: str) -> Membership:
    """A new user, created by the invitee with the password they chose, joining through the invitation."""
    from django.contrib.auth.password_validation import validate_password

    User = get_user_model()
    if not re.fullmatch(USERNAME_PATTERN, username or ""):
        raise ActionError("invalid_request", "a user name is 3 to 150 letters, digits or _ . @ + -",
                          details={"field": "username"})
    try:
        if len(password or "") < PASSWORD_MIN:
            raise ValidationError(f"a password has at least {PASSWORD_MIN} characters")
        validate_password(password)
    except ValidationError as exc:
        raise ActionError("invalid_request", " ".join(exc.messages), details={"field": "password"}) from None
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, email=row.email, password=password)
            return do_accept(row, user)
    except IntegrityError:
        raise ActionError("conflict", "that user name is taken: choose another (or sign in, if it is yours)",
                          details={"field": "username"}) from None
