"""A console member as the gateway's caller: the same rules as an API key's, with the member's role for scopes.

The console acts on a queue's data through the gateway's operations with the ``Caller`` made here, so a
member is held to the tenant's plan (rates, message size) and to the role's scopes exactly as an API key
with those scopes would be.
"""

from __future__ import annotations

from tideway_server.controlplane.api.principal import Principal
from tideway_server.gateway import catalog
from tideway_server.gateway.auth import Caller, Limits
from tideway_server.gateway.catalog import QueueInfo

__all__ = ["Caller", "QueueInfo", "member_caller", "member_queue"]


def member_caller(principal: Principal) -> Caller:
    plan = principal.tenant.plan
    return Caller(principal, Limits(plan.max_requests_per_s, plan.max_publish_bytes_per_s,
                                    plan.max_consume_bytes_per_s, plan.max_message_bytes))


def member_queue(principal: Principal, name: str) -> QueueInfo | None:
    """The ready queue ``name`` of the member's tenant, if the member may touch it."""
    return catalog.load(principal.tenant.pk, name) if principal.may_touch(name) else None
