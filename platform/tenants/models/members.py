from django.conf import settings
from django.db import models
from tideway_server.tenants.choices import Role


class Membership(models.Model):
    """A user's place in a tenant, with the role that says what they may do there."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_user_and_tenant")]
        ordering = ["tenant_id", "user_id"]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"
