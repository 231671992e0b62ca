from django.db import models


class ApiKey(models.Model):
    """A tenant's credential for scripts and services.

    The full key (``tw_<prefix>_<secret>``) is shown once, at creation. Only
    ``prefix`` (to find the row) and the SHA-256 of the secret are stored: the
    secret is 256 random bits, so a fast hash is as safe as a slow one and
    keeps authentication cheap on every request. A revoked key keeps its row
    (for the audit log) and never authenticates again.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="api_keys")
    name = models.CharField(max_length=100)
    prefix = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    scopes = models.JSONField(default=list)  # subset of tenants.choices.Scope
    queue_patterns = models.JSONField(default=list)  # fnmatch patterns of queue names this key may touch
    created = models.DateTimeField(auto_now_add=True)
    created_by = models.CharField(max_length=200, blank=True, default="")
    revoked_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField(null=True, blank=True)  # refused from then on, like a revoked key (None: never)
    last_used_at = models.DateTimeField(null=True, blank=True)  # written at most once a minute
    # AWS credentials for the SQS endpoint (tenants/aws_credentials.py): their secret is derived from this salt and
    # the deployment's signing key, so it is never stored; "" = none issued (or revoked). A new salt rotates them.
    aws_credentials_salt = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["tenant_id", "created", "id"]

    def state(self, now) -> str:
        """"revoked", "expired" (its expiry has passed) or "active"."""
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at is not None and self.expires_at <= now else "active"

    def refusal(self, now) -> str | None:
        """Why the key may not be used at ``now`` (revoked, expired), or None while it is live."""
        state = self.state(now)
        if state == "revoked":
            return "the API key was revoked"
        if state == "expired":
            return f"the API key expired at {self.expires_at:%Y-%m-%d %H:%M} UTC"
        return None

    def __str__(self) -> str:
        return f"{self.name} (tw_{self.prefix}_...)"
