"""Choice values of the topics app."""

from django.db import models


class QueueMode(models.TextChoices):
    STREAM = "stream", "stream (consumer groups read the log by offset)"
    QUEUE = "queue", "queue (messages acked one by one, redelivered, dead-lettered)"


class QueueStatus(models.TextChoices):
    CREATING = "creating", "creating"
    READY = "ready", "ready"
    DELETING = "deleting", "deleting"


class SchemaEncoding(models.TextChoices):
    CONFLUENT = "confluent", "Confluent wire format (magic byte, schema id, payload)"
    JSON = "json", "plain JSON validated against the subject's latest JSON Schema"
