from tideway_server.clusters.models.brokers import Broker
from tideway_server.clusters.models.clusters import Cluster
from tideway_server.clusters.models.lease import ControllerLease
from tideway_server.clusters.models.topics import Partition, Topic

__all__ = ["Broker", "Cluster", "ControllerLease", "Partition", "Topic"]
