"""API key strings: generation, parsing and the stored hash."""

from __future__ import annotations

import hashlib
import hmac
import secrets

KEY_PREFIX = "tw_"


def new_key() -> tuple[str, str, str]:
    """(full key, prefix, sha256 of the secret) for a fresh key."""
    prefix = secrets.token_hex(6)  # 12 hex characters: the public id of the key
    secret = secrets.token_urlsafe(32)  # 256 random bits
    return f"{KEY_PREFIX}{prefix}_{secret}", prefix, hash_secret(secret)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(prefix, secret) of a well-formed key string, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    prefix, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or len(prefix) != 12 or not secret:
        return None
    return prefix, secret


def secret_matches(secret: str, stored_sha256: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_sha256)
