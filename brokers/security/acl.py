"""What a tenant's key may do: scopes, and the queue names its patterns cover.

One definition for every port: the REST and WebSocket gateway
(``controlplane.api.principal``) and the brokers' native protocol
(``brokers.server.authorizer``) both ask ``Grant``.

* ``produce``: publish; ``consume``: read, receive, acknowledge, commit and
  seek; ``manage``: change queues and read their settings and groups.
* Queue patterns are shell-style (``fnmatch``, case-sensitive: ``orders-*``).
  A queue's dead-letter topic (``<queue>.dlq``) belongs to the queue: a key that
  may touch ``orders`` may touch ``orders.dlq``.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

__all__ = ["ALL_SCOPES", "CONSUME", "DEAD_LETTER_SUFFIX", "Grant", "MANAGE", "PRODUCE", "names_match"]

PRODUCE = "produce"
CONSUME = "consume"
MANAGE = "manage"
ALL_SCOPES = frozenset({PRODUCE, CONSUME, MANAGE})
DEAD_LETTER_SUFFIX = ".dlq"


def names_match(patterns: tuple[str, ...], queue_name: str) -> bool:
    """True when one of ``patterns`` covers ``queue_name`` (or the queue whose dead-letter topic it is)."""
    if any(fnmatch.fnmatchcase(queue_name, pattern) for pattern in patterns):
        return True
    if queue_name.endswith(DEAD_LETTER_SUFFIX) and len(queue_name) > len(DEAD_LETTER_SUFFIX):
        owner = queue_name[: -len(DEAD_LETTER_SUFFIX)]
        return any(fnmatch.fnmatchcase(owner, pattern) for pattern in patterns)
    return False


@dataclass(frozen=True)
class Grant:
    """A key's scopes and queue patterns (an empty pattern list means every queue)."""

    scopes: frozenset[str]
    queue_patterns: tuple[str, ...] = ("*",)

    def has_scope(self, scope: str) -> bool:
        return scope in self.scopes

    def may_touch(self, queue_name: str) -> bool:
        return names_match(self.queue_patterns, queue_name)

    def allows(self, scope: str, queue_name: str) -> bool:
        return scope in self.scopes and names_match(self.queue_patterns, queue_name)
