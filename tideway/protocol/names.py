"""Tenants' own names and the broker-side names they stand for.

Brokers hold every tenant's topics in one namespace, so the control plane
names a tenant's queue ``orders`` ``t<tenant id>.orders`` on the brokers (and
its dead-letter topic ``t<id>.orders.dlq``). Groups get a kind too, because a
stream group and a queue group of the same name are different groups:
``t<id>.stream.<group>`` and ``t<id>.queue.<group>`` (the gateway names them so).

A tenant never sees a broker-side name: requests from a tenant's connection
are given the prefix on the way in and lose it on the way out, and names
outside the tenant's prefix (another tenant's, internal topics such as
``__consumer_offsets``) simply do not exist for it.
"""

from __future__ import annotations

import re

__all__ = ["GROUP_KINDS", "TRANSACTION_KIND", "TenantNames", "own_group_name", "split_tenant_prefix"]

GROUP_KINDS = ("stream", "queue")
TRANSACTION_KIND = "txn"  # a tenant's transactional ids: t<id>.txn.<name>
_TENANT_PREFIX = re.compile(r"^(t[0-9]+\.)(.+)$")
_TENANT_GROUP = re.compile(r"^t[0-9]+\.(?:stream|queue)\.(.+)$")


def split_tenant_prefix(broker_name: str) -> tuple[str, str]:
    """(``t<id>.``, the tenant's own name) of a tenant's broker-side name; ("", name) for any other name.

    Headers that name a topic (the dead-letter origin) hold the tenant's own
    name, so a tenant reading them sees its names; whoever reads them with
    broker-side names puts the prefix of the topic they read back in front.
    """
    match = _TENANT_PREFIX.match(broker_name)
    return (match.group(1), match.group(2)) if match else ("", broker_name)


def own_group_name(broker_group: str) -> str:
    """The tenant's name of a broker-side group (``t2.queue.workers`` -> ``workers``); other names unchanged."""
    match = _TENANT_GROUP.match(broker_group)
    return match.group(1) if match else broker_group


class TenantNames:
    """Name mapping of one tenant."""

    __slots__ = ("tenant_id", "topic_prefix", "_group_prefixes", "_scrub")

    def __init__(self, tenant_id: int) -> None:
        self.tenant_id = tenant_id
        self.topic_prefix = f"t{tenant_id}."
        self._group_prefixes = {kind: f"t{tenant_id}.{kind}." for kind in GROUP_KINDS}
        # Broker-side names in free text (error messages): group prefixes first (longer).
        escaped = re.escape(self.topic_prefix)
        kinds = "|".join((*GROUP_KINDS, TRANSACTION_KIND))
        self._scrub = re.compile(rf"(?<![A-Za-z0-9._-]){escaped}(?:(?:{kinds})\.)?")

    def topic(self, name: str) -> str:
        """Broker-side name of the tenant's topic ``name``."""
        return self.topic_prefix + name

    def own_topic(self, broker_name: str) -> str | None:
        """The tenant's name for ``broker_name``, or None when it is not this tenant's."""
        if broker_name.startswith(self.topic_prefix):
            return broker_name[len(self.topic_prefix):]
        return None

    def group(self, name: str, kind: str) -> str:
        return self._group_prefixes[kind] + name

    def transactional_id(self, name: str) -> str:
        """Broker-side name of the tenant's transactional id ``name`` (tenants never share one)."""
        return f"{self.topic_prefix}{TRANSACTION_KIND}.{name}"

    def own_transactional_id(self, broker_name: str) -> str | None:
        prefix = f"{self.topic_prefix}{TRANSACTION_KIND}."
        return broker_name[len(prefix):] if broker_name.startswith(prefix) else None

    def own_group(self, broker_group: str) -> tuple[str, str] | None:
        """(the tenant's name, kind) of a broker-side group, or None when it is not this tenant's."""
        for kind, prefix in self._group_prefixes.items():
            if broker_group.startswith(prefix):
                return broker_group[len(prefix):], kind
        return None

    def scrub(self, text: str) -> str:
        """``text`` with this tenant's broker-side prefixes removed (for error messages)."""
        return self._scrub.sub("", text) if text else text
