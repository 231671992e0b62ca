"""Choice values of the clusters app."""

from django.db import models


class BrokerState(models.TextChoices):
    ALIVE = "alive", "alive"
    FENCED = "fenced", "fenced"
