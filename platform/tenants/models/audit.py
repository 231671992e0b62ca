from django.db import models


class AuditEntry(models.Model):
    """One management action, appended and never changed.

    ``actor`` says who acted ("key:<prefix>", "user:<username>", "cli",
    "operator:<username>"); ``action`` is a stable dotted name such as
    ``queue.create``; ``target`` names what was acted on; ``details`` holds
    the request's relevant fields (never secrets).
    """

    tenant = models.ForeignKey("tenants.Tenant", null=True, blank=True, on_delete=models.SET_NULL, related_name="audit_entries")
    tenant_slug = models.CharField(max_length=50, blank=True, default="")  # kept when the tenant row goes
    actor = models.CharField(max_length=200)
    action = models.CharField(max_length=100)
    target = models.CharField(max_length=300, blank=True, default="")
    details = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True, db_index=True)

    class Meta:
        ordering = ["-created", "-id"]
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor} {self.action} {self.target}"
