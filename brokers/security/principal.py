"""The authenticated caller of a connection."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from tideway_server.brokers.security.acl import Grant

from tideway.protocol.names import TenantNames

__all__ = ["Kind", "Principal"]


class Kind(enum.Enum):
    TENANT = "tenant"  # a tenant's API key: own topics and groups, within the key's scopes and patterns
    SERVICE = "service"  # the gateway, Celery, the control plane, operators: every client API, every topic
    PEER = "peer"  # a broker or controller holding the cluster secret: internal APIs too


@dataclass(frozen=True, eq=False)
class Principal:
    kind: Kind
    name: str  # "key:<prefix>", "service:gateway", "peer:broker-2": for logs and limits
    tenant_id: int | None = None
    grant: Grant | None = None
    key_prefix: str = ""  # a tenant key's prefix, to notice its revocation
    names: TenantNames | None = None
    connections_max: int = 0  # a tenant key's connections to one server, from its plan; 0: the listener's limit
    publish_bytes_per_s: int = 0  # the plan's rates on one broker (brokers/server/rates.py); 0: unlimited
    consume_bytes_per_s: int = 0

    @classmethod
    def tenant(cls, tenant_id: int, grant: Grant, key_prefix: str, connections_max: int = 0, *,
               publish_bytes_per_s: int = 0, consume_bytes_per_s: int = 0) -> Principal:
        return cls(Kind.TENANT, f"key:{key_prefix}", tenant_id, grant, key_prefix, TenantNames(tenant_id),
                   connections_max, publish_bytes_per_s, consume_bytes_per_s)

    @classmethod
    def service(cls, name: str) -> Principal:
        return cls(Kind.SERVICE, f"service:{name}")

    @classmethod
    def peer(cls, identity: str) -> Principal:
        return cls(Kind.PEER, f"peer:{identity}")

    @property
    def is_tenant(self) -> bool:
        return self.kind is Kind.TENANT
