"""Short-lived tokens for browsers: obtained with an API key, used instead of it (e.g. in a WebSocket URL)."""

from __future__ import annotations

from tideway_server.brokers.security.acl import names_match
from tideway_server.gateway.auth import TOKEN_TTL_MAX_S, issue_token
from tideway_server.gateway.errors import GatewayError, invalid
from tideway_server.gateway.views.base import GatewayView, json_response
from tideway_server.gateway.wire import TokenBody, decode


class TokensView(GatewayView):
    """POST {"ttl_seconds": 300, "scopes": [...], "queues": [...]} -> {"token", "expires_at"}.

    A token acts for the key it was obtained with, narrowed to the scopes and
    queue patterns asked for; it stops working when it expires or the key is
    revoked. Only a key (not another token) can obtain one.
    """

    queue_required = False
    required_scopes = {"POST": "consume"}

    async def authorise(self, request, name):
        call = await super().authorise(request, name)
        if call.caller.principal.actor.endswith(":token") or call.caller.token_patterns:
            raise GatewayError("forbidden", "a token cannot obtain another token: use the API key")
        return call

    async def post(self, request, call):
        body = decode(request.body, TokenBody)
        if not 1 <= body.ttl_seconds <= TOKEN_TTL_MAX_S:
            raise invalid(f"ttl_seconds must be 1 to {TOKEN_TTL_MAX_S}")
        if body.scopes is not None and not set(body.scopes) <= {"produce", "consume"}:
            raise invalid("a token's scopes are produce and/or consume")
        outside = [pattern for pattern in body.queues or () if not _within(pattern, call.caller.principal.queue_patterns)]
        if outside:
            raise GatewayError("forbidden", f"this key may not touch {', '.join(map(repr, outside))}: a token's queues must "
                               f"lie within the key's patterns ({', '.join(call.caller.principal.queue_patterns)})")
        token, expires = issue_token(call.caller, ttl_s=body.ttl_seconds, scopes=body.scopes, queues=body.queues)
        return json_response({"token": token, "expires_at": expires}, status=201)


_WILDCARDS = frozenset("*?[")


def _within(pattern: str, key_patterns: tuple[str, ...]) -> bool:
    """True when every queue ``pattern`` can name is one the key may touch (issue 40: a token was minted for any
    name, though refused wherever it was used). A plain name is checked as brokers check it; a pattern must be
    one of the key's, or start with the fixed part of a key pattern that ends in its only ``*``."""
    if not _WILDCARDS.intersection(pattern):
        return names_match(key_patterns, pattern)
    for allowed in key_patterns:
        if allowed == "*" or allowed == pattern:
            return True
        fixed = allowed[:-1]
        if allowed.endswith("*") and not _WILDCARDS.intersection(fixed) and pattern.startswith(fixed):
            return True
    return False
