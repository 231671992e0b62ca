from django.db import models


class Topic(models.Model):
    """A topic placed on a cluster; its settings are Kafka-style strings (see brokers.storage.config)."""

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="topics")
    name = models.CharField(max_length=200)
    partition_count = models.IntegerField()
    replication_factor = models.IntegerField()
    configs = models.JSONField(default=dict)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="unique_topic_name_per_cluster")]
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Partition(models.Model):
    """One partition's replica set and leadership.

    Invariants: ``leader`` is -1 (offline) or a member of ``isr``; ``isr`` is a
    subset of ``replicas``; ``leader_epoch`` grows on every leader change and
    ``partition_epoch`` on every change at all (leader or ISR).
    """

    topic = models.ForeignKey(Topic, on_delete=models.CASCADE, related_name="partitions")
    index = models.IntegerField()
    replicas = models.JSONField(default=list)  # broker ids; the first is the preferred leader
    isr = models.JSONField(default=list)
    leader = models.IntegerField(default=-1)
    leader_epoch = models.IntegerField(default=0)
    partition_epoch = models.IntegerField(default=0)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["topic", "index"], name="unique_partition_index")]
        ordering = ["topic_id", "index"]

    def __str__(self) -> str:
        return f"{self.topic.name}-{self.index}"
