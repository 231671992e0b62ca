"""Tenants' API keys as a broker knows them: digests learned from the control plane, cached.

A broker never stores a key or its secret: on a PLAIN authentication with a
tenant key it asks the controller (DESCRIBE_CREDENTIAL, over the internal
channel) for the key's digest, tenant, scopes and patterns, and compares
digests. Answers are cached for ``ttl_s`` (2 s), unknown prefixes too, so a
flood of made-up keys costs one lookup per prefix and period. Every request of
a tenant connection checks that its key is still live (``check``): past the
TTL that waits for a fresh answer, so while the controller answers, a revoked
key is refused within ``ttl_s`` plus one lookup.

The data plane does not stop with the controller (issue 40). When a lookup
fails (no active controller, a failover, a frozen one), the broker goes on
trusting the answers it has for up to ``outage_stale_max_s`` (10 minutes,
``--credentials-outage-max-s``) after each was fetched, and stops waiting on
the controller: a request past the TTL is served from the cache at once while
a lookup runs in the background (one per key, at most one a second). Keys it
has never seen cannot be checked then: they get AUTHENTICATION_UNAVAILABLE, a
retriable error, and clients try again. The bound is the price of a revocation
made during the outage: it cannot reach the brokers before the controller is
back (it then takes effect within about a second), and never later than
``outage_stale_max_s`` after the key was last checked.

Ownership: the event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from tideway_server.brokers.security.acl import Grant
from tideway_server.brokers.security.keys import secret_matches, split_key
from tideway_server.brokers.security.principal import Principal

from tideway.protocol import errors
from tideway.protocol import messages as m

__all__ = ["CredentialStore"]

log = logging.getLogger(__name__)

Lookup = Callable[[str], Awaitable[m.DescribeCredentialResponse]]
ENTRIES_MAX = 10_000
LOOKUPS_IN_FLIGHT_MAX = 32  # a flood of made-up keys must not flood the controller
OUTAGE_RETRY_S = 1.0  # while the controller does not answer, ask again about a key at most this often


@dataclass(frozen=True)
class _Entry:
    fetched: float  # monotonic
    answer: m.DescribeCredentialResponse


class CredentialStore:
    def __init__(self, lookup: Lookup | None, *, ttl_s: float = 2.0, outage_stale_max_s: float = 600.0) -> None:
        self._lookup = lookup  # None: no control plane to ask (a standalone broker): tenant keys never authenticate
        self.ttl_s = ttl_s
        self.outage_stale_max_s = outage_stale_max_s
        self._entries: dict[str, _Entry] = {}
        self._fetching: dict[str, asyncio.Future] = {}
        self._failed_at: float | None = None  # monotonic time of the last failed lookup; None once one succeeds

    @property
    def controller_unreachable(self) -> bool:
        """True while the last lookup failed: cached answers are trusted up to the outage bound."""
        return self._failed_at is not None

    async def authenticate(self, key: str) -> Principal:
        """The principal of tenant API key ``key``; SaslAuthenticationFailedError when it is not a live key,
        AuthenticationUnavailableError (retriable) when it cannot be checked now."""
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
        return Principal.tenant(answer.tenant_id, grant, prefix, answer.connections_max,
                                publish_bytes_per_s=answer.publish_bytes_per_s,
                                consume_bytes_per_s=answer.consume_bytes_per_s)

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
        now = time.monotonic()
        if entry is not None and now - entry.fetched < self.ttl_s:
            return entry.answer
        if entry is not None and self._failed_at is not None and now - entry.fetched < self.outage_stale_max_s:
            # The controller did not answer last time: serve what we know, ask again in the background.
            if prefix not in self._fetching and now - self._failed_at >= OUTAGE_RETRY_S and len(self._fetching) < LOOKUPS_IN_FLIGHT_MAX:
                self._start_fetch(prefix).add_done_callback(_retrieve)
            return entry.answer
        pending = self._fetching.get(prefix)
        if pending is None:
            if len(self._fetching) >= LOOKUPS_IN_FLIGHT_MAX:
                raise errors.AuthenticationUnavailableError("too many API keys are being checked right now: retry")
            pending = self._start_fetch(prefix)
        return await asyncio.shield(pending)

    def _start_fetch(self, prefix: str) -> asyncio.Future:
        pending = self._fetching[prefix] = asyncio.ensure_future(self._fetch(prefix))
        pending.add_done_callback(lambda _f: self._fetching.pop(prefix, None))
        return pending

    async def _fetch(self, prefix: str) -> m.DescribeCredentialResponse:
        assert self._lookup is not None
        try:
            answer = await self._lookup(prefix)
        except errors.TidewayError as exc:
            if self._failed_at is None:
                log.warning("cannot check API keys with the controller (%s): trusting the keys checked in the last "
                            "%.0f s until it answers", exc.name, self.outage_stale_max_s)
            self._failed_at = time.monotonic()
            stale = self._entries.get(prefix)
            if stale is not None and time.monotonic() - stale.fetched < self.outage_stale_max_s:
                return stale.answer
            raise errors.AuthenticationUnavailableError(
                f"cannot check the API key right now ({exc.name}): retry") from exc
        if self._failed_at is not None:
            log.warning("the controller answers API-key checks again")
            self._failed_at = None
        if len(self._entries) >= ENTRIES_MAX:
            now = time.monotonic()
            self._entries = {p: e for p, e in self._entries.items() if now - e.fetched < self.ttl_s}
            if len(self._entries) >= ENTRIES_MAX:
                self._entries.clear()
        self._entries[prefix] = _Entry(time.monotonic(), answer)
        return answer


def _retrieve(future: asyncio.Future) -> None:
    """A background lookup's failure was handled in ``_fetch`` (logged, remembered): mark it retrieved."""
    if not future.cancelled():
        future.exception()
