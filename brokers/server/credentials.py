"""Tenants' API keys as a broker knows them: digests learned from the control plane, cached.

A broker never stores a key or its secret: on a PLAIN authentication with a
tenant key it asks the controller (DESCRIBE_CREDENTIAL, over the internal
channel) for the key's digest, tenant, scopes and patterns, and compares
digests. Answers are cached for ``ttl_s`` (2 s), unknown prefixes too, so a
flood of made-up keys costs one lookup per prefix and period. Every request of
a tenant connection checks that its key is still live (``check``): past the
TTL that waits for a fresh answer, so a revoked key is refused within
``ttl_s`` plus one lookup. While the controller cannot answer (a failover
takes about 2 s) an answer up to ``stale_max_s`` (4.5 s) old still counts;
past that, nothing does: a revoked key is always refused within 5 s.

Ownership: the event-loop thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from brokers import errors
from brokers.protocol import messages as m
from brokers.security.acl import Grant
from brokers.security.keys import secret_matches, split_key
from brokers.security.principal import Principal

__all__ = ["CredentialStore"]

Lookup = Callable[[str], Awaitable[m.DescribeCredentialResponse]]
ENTRIES_MAX = 10_000
LOOKUPS_IN_FLIGHT_MAX = 32  # a flood of made-up keys must not flood the controller


@dataclass(frozen=True)
class _Entry:
    fetched: float  # monotonic
    answer: m.DescribeCredentialResponse


class CredentialStore:
    def __init__(self, lookup: Lookup | None, *, ttl_s: float = 2.0, stale_max_s: float = 4.5) -> None:
        self._lookup = lookup  # None: no control plane to ask (a standalone broker): tenant keys never authenticate
        self.ttl_s = ttl_s
        self.stale_max_s = stale_max_s
        self._entries: dict[str, _Entry] = {}
        self._fetching: dict[str, asyncio.Future] = {}

    async def authenticate(self, key: str) -> Principal:
        """The principal of tenant API key ``key``; SaslAuthenticationFailedError when it is not a live key."""
        parts = split_key(key)
        if parts is None:
            raise errors.SaslAuthenticationFailedError("the API key is malformed (expected tw_<12 hex>_<secret>)")
        if self._lookup is None:
            raise errors.SaslAuthenticationFailedError(
                "this broker runs without a controller, so it knows no tenant keys: use a service key")
        prefix, secret = parts
        answer = await self._answer(prefix)
        if not answer.found or not secret_matches(secret, answer.secret_sha256):
            raise errors.SaslAuthenticationFailedError("the API key is not valid")
        if answer.revoked:
            raise errors.SaslAuthenticationFailedError("the API key was revoked")
        grant = Grant(frozenset(answer.scopes), tuple(answer.queue_patterns) or ("*",))
        return Principal.tenant(answer.tenant_id, grant, prefix)

    def is_fresh(self, principal: Principal) -> bool:
        """True when the key's cached answer is recent enough to trust without asking (the hot path)."""
        entry = self._entries.get(principal.key_prefix)
        return entry is not None and time.monotonic() - entry.fetched < self.ttl_s

    async def check(self, principal: Principal) -> None:
        """Raise SaslAuthenticationFailedError when ``principal``'s key was revoked or deleted since."""
        answer = await self._answer(principal.key_prefix)
        if not answer.found or answer.revoked or answer.tenant_id != principal.tenant_id:
            raise errors.SaslAuthenticationFailedError("the API key was revoked: authenticate again with a live key")

    async def _answer(self, prefix: str) -> m.DescribeCredentialResponse:
        entry = self._entries.get(prefix)
        if entry is not None and time.monotonic() - entry.fetched < self.ttl_s:
            return entry.answer
        pending = self._fetching.get(prefix)
        if pending is None:
            if len(self._fetching) >= LOOKUPS_IN_FLIGHT_MAX:
                raise errors.SaslAuthenticationFailedError("too many API keys are being checked right now: retry")
            pending = self._fetching[prefix] = asyncio.ensure_future(self._fetch(prefix))
            pending.add_done_callback(lambda _f: self._fetching.pop(prefix, None))
        return await asyncio.shield(pending)

    async def _fetch(self, prefix: str) -> m.DescribeCredentialResponse:
        assert self._lookup is not None
        try:
            answer = await self._lookup(prefix)
        except errors.TidewayError as exc:
            stale = self._entries.get(prefix)
            if stale is not None and time.monotonic() - stale.fetched < self.stale_max_s:
                return stale.answer
            raise errors.SaslAuthenticationFailedError(f"cannot check the API key right now ({exc.name}): retry") from exc
        if len(self._entries) >= ENTRIES_MAX:
            now = time.monotonic()
            self._entries = {p: e for p, e in self._entries.items() if now - e.fetched < self.ttl_s}
            if len(self._entries) >= ENTRIES_MAX:
                self._entries.clear()
        self._entries[prefix] = _Entry(time.monotonic(), answer)
        return answer
