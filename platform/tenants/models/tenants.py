from django.db import models


class Tenant(models.Model):
    """An organisation using Tideway: it owns queues, keys and schemas, and pays for a plan.

    ``dedicated_cluster``, when set, is where all its queues are placed;
    otherwise placement picks a shared cluster in ``region``.
    """

    name = models.CharField(max_length=100)
    slug = models.SlugField(max_length=50, unique=True)
    plan = models.ForeignKey("tenants.Plan", on_delete=models.PROTECT, related_name="tenants")
    region = models.CharField(max_length=50, default="local")
    dedicated_cluster = models.ForeignKey(
        "clusters.Cluster", null=True, blank=True, on_delete=models.PROTECT, related_name="dedicated_tenants"
    )
    created = models.DateTimeField(auto_now_add=True)
    # Whether members may download messages from the console (JSON or CSV); an owner or admin turns it off.
    message_export = models.BooleanField(default=True)
    # Set by an operator: every key and member of the tenant is refused (API, gateway, brokers, console) until cleared.
    suspended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug
