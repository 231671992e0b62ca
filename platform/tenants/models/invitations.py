from django.conf import settings
from django.db import models


class Invitation(models.Model):
    """An owner's or admin's invitation of an e-mail address to a tenant, with a role.

    The invitee joins only by opening the signed link (``tenants.invitations``) and accepting, signed in or
    signing up there: nobody is added to a tenant, nor given a password, without acting themselves. A link works
    once, for ``INVITATION_DAYS``, unless cancelled.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="invitations")
    email = models.EmailField()
    role = models.CharField(max_length=20)
    invited_by = models.CharField(max_length=200)
    created = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    accepted_at = models.DateTimeField(null=True, blank=True)
    accepted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    cancelled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def pending(self, now) -> bool:
        return self.accepted_at is None and self.cancelled_at is None and self.expires_at > now

    def __str__(self) -> str:
        return f"{self.email} to {self.tenant_id} as {self.role}"
