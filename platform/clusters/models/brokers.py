from django.db import models
from tideway_server.clusters.choices import BrokerState


class Broker(models.Model):
    """A broker process as the controller knows it.

    ``broker_epoch`` grows every time the broker registers (starts); requests
    carrying an older one come from a previous life of the process.
    """

    cluster = models.ForeignKey("clusters.Cluster", on_delete=models.CASCADE, related_name="brokers")
    broker_id = models.IntegerField()
    host = models.CharField(max_length=255)  # the client listener, as clients reach it
    port = models.IntegerField()
    internal_host = models.CharField(max_length=255, blank=True, default="")  # the internal listener, as peers reach it
    internal_port = models.IntegerField(default=-1)
    kafka_host = models.CharField(max_length=255, blank=True, default="")  # the Kafka listener, as Kafka clients reach it
    kafka_port = models.IntegerField(default=-1)  # -1: the broker has no Kafka listener
    rack = models.CharField(max_length=100, blank=True, default="")
    state = models.CharField(max_length=10, choices=BrokerState.choices, default=BrokerState.FENCED)
    broker_epoch = models.BigIntegerField(default=0)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["cluster", "broker_id"], name="unique_broker_id_per_cluster")]
        ordering = ["broker_id"]

    def __str__(self) -> str:
        return f"broker {self.broker_id} ({self.host}:{self.port}, {self.state})"
