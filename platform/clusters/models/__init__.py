from clusters.models.brokers import Broker
from clusters.models.clusters import Cluster
from clusters.models.lease import ControllerLease
from clusters.models.topics import Partition, Topic

__all__ = ["Broker", "Cluster", "ControllerLease", "Partition", "Topic"]
