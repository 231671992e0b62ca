from django.db import models


class ControllerLease(models.Model):
    """Who is the active controller of a cluster, until when, and in which epoch.

    Taken and renewed only by conditional UPDATEs (see clusters.controller.lease):
    the epoch grows by one at every takeover and fences the previous holder,
    whose requests brokers then refuse.
    """

    cluster = models.OneToOneField("clusters.Cluster", on_delete=models.CASCADE, related_name="lease")
    holder = models.CharField(max_length=200, blank=True, default="")
    address = models.CharField(max_length=255, blank=True, default="")  # host:port of the holder's listener
    epoch = models.BigIntegerField(default=0)
    expires_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"lease of {self.cluster} held by {self.holder or 'nobody'} (epoch {self.epoch})"
