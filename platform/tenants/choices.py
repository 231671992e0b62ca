"""Choice values of the tenants app."""

from django.db import models
from tideway_server.brokers.security import acl

# A console account's user name and password (sign-up and an invitee's own account take the same).
USERNAME_PATTERN = r"[A-Za-z0-9_.@+-]{3,150}"
PASSWORD_MIN = 10


class Role(models.TextChoices):
    OWNER = "owner", "owner"
    ADMIN = "admin", "admin"
    DEVELOPER = "developer", "developer"
    VIEWER = "viewer", "viewer"


class Scope(models.TextChoices):
    PRODUCE = acl.PRODUCE, "produce"
    CONSUME = acl.CONSUME, "consume"
    MANAGE = acl.MANAGE, "manage"


ALL_SCOPES = frozenset(Scope.values)
assert ALL_SCOPES == acl.ALL_SCOPES, "scopes are defined once, in brokers.security.acl"

# What a signed-in member may do, by role. Owners and admins also manage members.
ROLE_SCOPES = {
    Role.OWNER: ALL_SCOPES,
    Role.ADMIN: ALL_SCOPES,
    Role.DEVELOPER: ALL_SCOPES,
    Role.VIEWER: frozenset(),
}
MEMBER_MANAGERS = frozenset({Role.OWNER, Role.ADMIN})
