"""Who is calling the data gateway: API keys (cached) and short-lived browser tokens.

A key is looked up in the database at most once per ``KEY_CACHE_SECONDS`` per
process, so the hot path does no ORM work; a revoked key therefore stops
working within that time (the API promises 5 s). Browser tokens are signed
(Django's signing, the deployment's SECRET_KEY) and name the key they were
obtained with: revoking the key stops its tokens too, and a token never holds
the key's secret, so no long-lived secret travels in a WebSocket URL.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.core import signing
from django.utils import timezone
from tideway_server.brokers.security.acl import names_match
from tideway_server.controlplane.api.principal import Principal
from tideway_server.gateway.errors import GatewayError
from tideway_server.tenants.keys import secret_matches, split_key

KEY_CACHE_SECONDS = 3.0
TOKEN_PREFIX = "twt_"
TOKEN_SALT = "tideway.gateway.token"
TOKEN_TTL_MAX_S = 3600
LAST_USED_WRITE_INTERVAL_S = 60.0
_CACHE_MAX = 10_000


@dataclass(frozen=True)
class Limits:
    """The rate quotas and size limit of a tenant's plan."""

    requests_per_s: int
    publish_bytes_per_s: int
    consume_bytes_per_s: int
    max_message_bytes: int


@dataclass(frozen=True)
class Caller:
    principal: Principal
    limits: Limits
    token_patterns: tuple[str, ...] = ()  # a token may narrow its key's queue patterns further

    def may_touch(self, queue_name: str) -> bool:
        if self.token_patterns and not names_match(self.token_patterns, queue_name):
            return False
        return self.principal.may_touch(queue_name)

    @property
    def tenant_id(self) -> int:
        return self.principal.tenant.pk


@dataclass(frozen=True)
class KeyRow:
    secret_sha256: str
    revoked: bool
    caller: Caller
    aws_credentials_salt: str = ""  # "" = no AWS credentials (tenants/aws_credentials.py)


_keys: dict[str, tuple[float, KeyRow | None]] = {}


def _load_key(prefix: str) -> KeyRow | None:
    from django.db import close_old_connections
    from tideway_server.tenants.models import ApiKey

    close_old_connections()  # the gateway bypasses Django's per-request connection handling
    row = ApiKey.objects.select_related("tenant", "tenant__plan").filter(prefix=prefix).first()
    if row is None:
        return None
    now = timezone.now()
    if row.revoked_at is None and (row.last_used_at is None or (now - row.last_used_at).total_seconds() > LAST_USED_WRITE_INTERVAL_S):
        ApiKey.objects.filter(pk=row.pk).update(last_used_at=now)
    plan = row.tenant.plan
    principal = Principal(tenant=row.tenant, scopes=frozenset(row.scopes), actor=f"key:{row.prefix}",
                          queue_patterns=tuple(row.queue_patterns) or ("*",), api_key=row)
    limits = Limits(plan.max_requests_per_s, plan.max_publish_bytes_per_s, plan.max_consume_bytes_per_s, plan.max_message_bytes)
    # A suspended tenant's keys are refused like revoked ones (within KEY_CACHE_SECONDS); so is an expired key.
    refused = row.refusal(now) is not None or row.tenant.suspended_at is not None
    return KeyRow(row.secret_sha256, refused, Caller(principal, limits), row.aws_credentials_salt)


async def key_row(prefix: str) -> KeyRow | None:
    """The key with this prefix as the gateway knows it (read at most once per KEY_CACHE_SECONDS), or None."""
    now = time.monotonic()
    cached = _keys.get(prefix)
    if cached is not None and cached[0] > now:
        return cached[1]
    row = await sync_to_async(_load_key)(prefix)
    if len(_keys) >= _CACHE_MAX:
        _keys.clear()
    _keys[prefix] = (now + KEY_CACHE_SECONDS, row)
    return row


def _unauthenticated() -> GatewayError:
    return GatewayError("unauthenticated", "authenticate with 'Authorization: Bearer <API key>' (or a token from POST /api/v1/tokens)")


async def caller_for_key(key: str) -> Caller:
    parts = split_key(key)
    if parts is None:
        raise GatewayError("invalid_credentials", "the API key is malformed (expected tw_<12 hex>_<secret>)")
    prefix, secret = parts
    row = await key_row(prefix)
    if row is None or not secret_matches(secret, row.secret_sha256):
        raise GatewayError("invalid_credentials", "the API key is not valid")
    if row.revoked:
        raise GatewayError("invalid_credentials", "the API key was revoked or has expired")
    return row.caller


def issue_token(caller: Caller, *, ttl_s: int, scopes: list[str] | None, queues: list[str] | None) -> tuple[str, int]:
    """A signed token acting for ``caller``'s key, narrowed to ``scopes`` and queue ``queues`` patterns."""
    principal = caller.principal
    expires = int(time.time()) + ttl_s
    payload = {"k": principal.api_key.prefix, "e": expires}
    if scopes is not None:
        payload["s"] = sorted(set(scopes) & principal.scopes)
    if queues is not None:
        payload["q"] = list(queues)
    return TOKEN_PREFIX + signing.dumps(payload, salt=TOKEN_SALT, compress=True), expires


async def caller_for_token(token: str) -> Caller:
    try:
        payload = signing.loads(token[len(TOKEN_PREFIX):], salt=TOKEN_SALT)
    except signing.BadSignature:
        raise GatewayError("invalid_credentials", "the token is not valid") from None
    if payload.get("e", 0) < time.time():
        raise GatewayError("invalid_credentials", "the token has expired: get a new one with POST /api/v1/tokens")
    row = await key_row(str(payload.get("k", "")))
    if row is None or row.revoked:
        raise GatewayError("invalid_credentials", "the API key this token was obtained with was revoked or has expired")
    caller = row.caller
    if "s" in payload:
        principal = caller.principal
        narrowed = Principal(tenant=principal.tenant, scopes=principal.scopes & frozenset(payload["s"]),
                             actor=principal.actor + ":token", queue_patterns=principal.queue_patterns, api_key=principal.api_key)
        caller = Caller(narrowed, caller.limits)
    if "q" in payload:
        caller = Caller(caller.principal, caller.limits, token_patterns=tuple(payload["q"]))
    return caller


async def authenticate(authorization: str, token: str = "") -> Caller:
    """The caller of a request from its Authorization header (or a ``token`` query parameter)."""
    scheme, _, value = authorization.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer" and value:
        return await (caller_for_token(value) if value.startswith(TOKEN_PREFIX) else caller_for_key(value))
    if token:
        return await caller_for_token(token)
    raise _unauthenticated()
