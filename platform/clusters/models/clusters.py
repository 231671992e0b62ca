from django.db import models


class Cluster(models.Model):
    """A group of brokers that replicate among themselves, run by one controller."""

    name = models.CharField(max_length=100, unique=True)
    region = models.CharField(max_length=50, default="local")
    created = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.name
