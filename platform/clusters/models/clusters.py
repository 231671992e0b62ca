from django.db import models
from tideway_server.clusters.choices import ProvisionerKind


class Cluster(models.Model):
    """A group of brokers that replicate among themselves, run by one controller.

    ``spec`` is what the provisioner builds (brokers, storage, image; see
    clusters.provisioning.ClusterSpec). ``bootstrap`` is a comma-separated
    list of broker addresses for clients, used until brokers have registered
    with the controller (their registered addresses win). ``max_partitions``
    is the capacity placement fills; ``dedicated`` clusters take only the
    tenants that point at them.
    """

    name = models.CharField(max_length=100, unique=True)
    region = models.CharField(max_length=50, default="local")
    bootstrap = models.CharField(max_length=1000, blank=True, default="")
    max_partitions = models.PositiveIntegerField(default=4000)
    dedicated = models.BooleanField(default=False)
    provisioner = models.CharField(max_length=20, choices=ProvisionerKind.choices, default=ProvisionerKind.LOCAL)
    spec = models.JSONField(default=dict, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
