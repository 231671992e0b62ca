"""Cluster state of the control plane: brokers, topics, partitions, the controller lease."""
