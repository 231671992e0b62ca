"""Connection limits of a server (broker or controller), and who holds which connection.

Every count is bounded, and a refusal is logged (at most once per reason every
10 s, with how many were not logged) and counted in
``tideway_connections_refused_total{reason}``:

* ``total``: connections open at once;
* ``unauthenticated``: connections that have not authenticated yet (they may
  send only API_VERSIONS, SASL_HANDSHAKE and SASL_AUTHENTICATE, in frames of at
  most ``unauthenticated_frame_bytes_max``, and must authenticate within
  ``authentication_timeout_ms``);
* ``per_principal``: connections of one authenticated principal (an API key,
  a service, internal peers); a tenant key's plan may lower it
  (``Principal.connections_max``).

Memory that callers make the server hold is bounded after authentication too
(issue 40: four partial 60 MiB frames with a valid key held 240 MB until the
connections closed). A request that does not arrive in one read is kept only
within ``RequestBuffers``: a budget for the whole server and a share of it per
principal, held from the request's first byte until it has been handled; a
request that does not fit is read past without being kept and answered with
BROKER_BUSY (retriable). A tenant's request other than a produce may not
exceed ``tenant_request_bytes_max``, and a request must arrive whole within
``request_read_timeout_ms`` of its first byte (reason ``request_read_timeout``).

Ownership: the event-loop thread.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

__all__ = ["ConnectionLimits", "ConnectionRegistry", "RateLimitedLog", "RequestBuffers"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ConnectionLimits:
    connections_max: int = 10_000
    unauthenticated_connections_max: int = 1_000
    connections_per_principal_max: int = 1_000
    frame_bytes_max: int = 100 << 20  # largest request of an authenticated connection (socket.request.max.bytes)
    unauthenticated_frame_bytes_max: int = 64 << 10
    in_flight_per_connection_max: int = 100
    unauthenticated_in_flight_max: int = 4
    authentication_timeout_ms: int = 10_000
    tenant_request_bytes_max: int = 4 << 20  # a tenant's requests but produces (which carry the records)
    request_read_timeout_ms: int = 30_000  # a request's bytes arrive within this of its first byte


class RateLimitedLog:
    """Log a warning per reason at most once every ``interval_s`` (a flood must not flood the log too)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0) -> None:
        self._logger = logger
        self._interval_s = interval_s
        self._last: dict[str, float] = {}
        self._suppressed: Counter[str] = Counter()

    def warning(self, reason: str, message: str, *args) -> None:
        now = time.monotonic()
        if now - self._last.get(reason, -1e9) < self._interval_s:
            self._suppressed[reason] += 1
            return
        self._last[reason] = now
        suppressed = self._suppressed.pop(reason, 0)
        suffix = f" ({suppressed} more like it not logged)" if suppressed else ""
        self._logger.warning(message + suffix, *args)


class ConnectionRegistry:
    """Counts connections against ``ConnectionLimits``; ``on_refused(reason)`` is told of every refusal."""

    def __init__(self, limits: ConnectionLimits, on_refused=lambda reason: None) -> None:
        self.limits = limits
        self.total = 0
        self.unauthenticated = 0
        self.per_principal: Counter[str] = Counter()
        self._on_refused = on_refused
        self._log = RateLimitedLog(log)

    def refuse(self, reason: str, message: str, *args) -> None:
        self._on_refused(reason)
        self._log.warning(reason, message, *args)

    def admit(self, peer: str) -> bool:
        """A new connection: False (and counted as refused) when a limit is reached."""
        if self.total >= self.limits.connections_max:
            self.refuse("total", "refusing a connection from %s: %d connections open (limit)", peer, self.total)
            return False
        if self.unauthenticated >= self.limits.unauthenticated_connections_max:
            self.refuse("unauthenticated", "refusing a connection from %s: %d connections not yet authenticated (limit)",
                        peer, self.unauthenticated)
            return False
        self.total += 1
        self.unauthenticated += 1
        return True

    def promote(self, principal_name: str, peer: str, limit: int = 0) -> bool:
        """The connection authenticated as ``principal_name``: False when that principal has too many (the
        listener's limit, or ``limit`` when lower and not 0)."""
        allowed = self.limits.connections_per_principal_max
        if 0 < limit < allowed:
            allowed = limit
        if self.per_principal[principal_name] >= allowed:
            self.refuse("per_principal", "refusing %s from %s: it has %d connections (limit)", principal_name, peer,
                        self.per_principal[principal_name])
            return False
        self.unauthenticated -= 1
        self.per_principal[principal_name] += 1
        return True

    def release(self, principal_name: str | None) -> None:
        """A counted connection closed (``principal_name`` None: it never authenticated)."""
        self.total -= 1
        if principal_name is None:
            self.unauthenticated -= 1
            return
        self.per_principal[principal_name] -= 1
        if self.per_principal[principal_name] <= 0:
            del self.per_principal[principal_name]
        assert self.total >= 0 and self.unauthenticated >= 0


class RequestBuffers:
    """How many bytes of requests in progress a server holds, in all and per principal (see the module's note).

    ``reserve`` before keeping a request's bytes, ``release`` once it is handled. Ownership: the event loop.
    """

    def __init__(self, bytes_max: int, per_principal_bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.per_principal_bytes_max = per_principal_bytes_max
        self.held = 0
        self.held_by: Counter[str] = Counter()

    def reserve(self, principal_name: str, size: int) -> str:
        """Hold ``size`` bytes for ``principal_name``; "" when done, else why not (nothing is held then)."""
        if self.held_by[principal_name] + size > self.per_principal_bytes_max:
            return (f"{principal_name} has {self.held_by[principal_name]} bytes of requests in progress here; "
                    f"{size} more would pass its share of {self.per_principal_bytes_max}")
        if self.held + size > self.bytes_max:
            return f"{self.held} bytes of requests in progress here; {size} more would pass {self.bytes_max}"
        self.held += size
        self.held_by[principal_name] += size
        return ""

    def release(self, principal_name: str, size: int) -> None:
        self.held -= size
        self.held_by[principal_name] -= size
        if self.held_by[principal_name] <= 0:
            del self.held_by[principal_name]
        assert self.held >= 0, "released more than was reserved"
