from django.db import models
from tideway_server.topics.choices import QueueMode, QueueStatus, SchemaEncoding


class Queue(models.Model):
    """A tenant's queue or topic (one concept: a partitioned log read in stream or queue mode).

    The broker-side topic is ``broker_topic`` = ``t<tenant id>.<name>``: tenant
    ids are unique, so tenants' names never collide on a shared cluster. Queue
    mode also has a dead-letter topic ``<broker_topic>.dlq`` created and deleted
    with it (names ending in ``.dlq`` are therefore reserved).
    ``retention_bytes`` is per partition, as in Kafka.
    """

    tenant = models.ForeignKey("tenants.Tenant", on_delete=models.CASCADE, related_name="queues")
    name = models.CharField(max_length=100)
    mode = models.CharField(max_length=10, choices=QueueMode.choices, default=QueueMode.QUEUE)
    status = models.CharField(max_length=10, choices=QueueStatus.choices, default=QueueStatus.CREATING)
    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.PROTECT, related_name="queues")
    broker_topic = models.CharField(max_length=200, unique=True)
    partitions = models.PositiveIntegerField()
    replication_factor = models.PositiveIntegerField()
    retention_ms = models.BigIntegerField()
    retention_bytes = models.BigIntegerField()
    compaction = models.BooleanField(default=False)
    max_message_bytes = models.PositiveIntegerField()
    # Queue mode only:
    visibility_timeout_ms = models.PositiveIntegerField(default=30_000)
    max_deliveries = models.PositiveIntegerField(default=5)
    delivery_delay_ms = models.PositiveIntegerField(default=0)
    fifo = models.BooleanField(default=False)
    # Where its dead letters go: another queue of the tenant (SQS's RedrivePolicy), else its own dead-letter topic.
    dead_letter_queue = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                          related_name="dead_letter_sources")
    # A schema every message must match ("" = none), and how messages carry it.
    schema_subject = models.CharField(max_length=255, blank=True, default="")
    schema_encoding = models.CharField(max_length=10, choices=SchemaEncoding.choices, default=SchemaEncoding.CONFLUENT)
    # What SQS knows of a queue and Tideway's queue model does not (the SQS endpoint, docs/sqs.md): its receive
    # wait, content-based deduplication, tags.
    sqs_settings = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)
    updated = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["tenant", "name"], name="unique_queue_name_per_tenant")]
        ordering = ["tenant_id", "name"]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name}"

    @property
    def dead_letter_topic(self) -> str:
        """Its own dead-letter topic (made and deleted with it)."""
        return f"{self.broker_topic}.dlq"

    @property
    def dead_letter_target(self) -> str:
        """The topic its dead letters go to: the dead-letter queue's when it names one, else its own."""
        return self.dead_letter_queue.broker_topic if self.dead_letter_queue_id else self.dead_letter_topic
