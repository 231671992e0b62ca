from django.db import models


class Schema(models.Model):
    """A tenant's schema text; its primary key is the schema id clients put in messages.

    The same text registered twice (under any subject of the tenant) has one
    id: ``fingerprint`` is the SHA-256 of the type and the text.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="schemas")
    schema_type = models.CharField(max_length=10)  # AVRO, JSON or PROTOBUF
    text = models.TextField()
    references = models.JSONField(default=list, blank=True)
    fingerprint = models.CharField(max_length=64)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "fingerprint"], name="one_id_per_schema_text")]


class SubjectVersion(models.Model):
    """Version ``version`` of ``subject`` is schema ``schema``.

    Versions only grow (a soft-deleted version keeps its number); ``deleted``
    hides a version until it is deleted permanently.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="subject_versions")
    subject = models.CharField(max_length=255)
    version = models.PositiveIntegerField()
    schema = models.ForeignKey(Schema, on_delete=models.PROTECT, related_name="versions")
    deleted = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "subject", "version"], name="unique_subject_version")]
        ordering = ["subject", "version"]


class CompatibilityConfig(models.Model):
    """A tenant's compatibility level: global when ``subject`` is "", else for one subject."""

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="compatibility_configs")
    subject = models.CharField(max_length=255, blank=True, default="")
    level = models.CharField(max_length=20)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "subject"], name="one_level_per_subject")]
