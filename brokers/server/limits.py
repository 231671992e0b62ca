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
  a service, internal peers).

Ownership: the event-loop thread.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass

__all__ = ["ConnectionLimits", "ConnectionRegistry", "RateLimitedLog"]

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

    def promote(self, principal_name: str, peer: str) -> bool:
        """The connection authenticated as ``principal_name``: False when that principal has too many."""
        if self.per_principal[principal_name] >= self.limits.connections_per_principal_max:
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
