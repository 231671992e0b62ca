"""Choice values of the clusters app."""

from django.db import models


class BrokerState(models.TextChoices):
    ALIVE = "alive", "alive"
    FENCED = "fenced", "fenced"


class ProvisionerKind(models.TextChoices):
    LOCAL = "local", "local processes"
    KUBERNETES = "kubernetes", "Kubernetes manifests"
