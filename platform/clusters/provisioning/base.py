"""What a cluster is made of, and the interface every provisioner offers."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Protocol


@dataclass(frozen=True)
class ClusterSpec:
    """A broker cluster to build. Units are in the names."""

    name: str
    region: str = "local"
    brokers: int = 3
    controllers: int = 2  # one active, the others stand by
    host: str = "127.0.0.1"  # local provisioner: the address everything listens on
    controller_port: int = 9400
    first_broker_port: int = 9401  # broker i listens on first_broker_port + i - 1
    image: str = "tideway:latest"  # Kubernetes: the image that has the `tideway` console script
    namespace: str = "tideway"
    storage_gib: int = 100
    cpu: str = "2"
    memory: str = "4Gi"
    replica_lag_time_max_ms: int = 10_000
    gateways: int = 2  # Kubernetes: API and gateway pods behind their Service (the local deployment: `tideway up --gateways`)
    api_hosts: str = ""  # Kubernetes: host names clients reach the gateways by, comma-separated (default: the Service's)

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= 100:
            raise ValueError(f"a cluster has 1 to 100 brokers, not {self.brokers}")
        if not 1 <= self.controllers <= 5:
            raise ValueError(f"a cluster has 1 to 5 controllers, not {self.controllers}")
        if not 1 <= self.gateways <= 100:
            raise ValueError(f"a cluster has 1 to 100 gateways, not {self.gateways}")
        if self.storage_gib < 1:
            raise ValueError("storage_gib must be at least 1")

    @classmethod
    def from_dict(cls, name: str, values: dict) -> ClusterSpec:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown cluster spec fields {unknown}; known: {sorted(known)}")
        return cls(**{**values, "name": name})


class Provisioner(Protocol):
    """Builds (or describes how to build) a cluster from its spec."""

    kind: str

    def bootstrap(self, spec: ClusterSpec) -> str:
        """Comma-separated broker addresses clients use to reach the cluster."""
        ...
