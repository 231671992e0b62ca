"""Replication of partitions between brokers (Kafka's ISR design).

``Partition`` is one replica's state and the leader's bookkeeping of its
followers; ``ReplicaFetcher`` is the follower side, pulling from a leader.
"""

from tideway_server.brokers.replication.fetcher import ReplicaFetcher
from tideway_server.brokers.replication.partition import Partition, Role

__all__ = ["Partition", "ReplicaFetcher", "Role"]
