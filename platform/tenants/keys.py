"""API key strings: generation here; parsing and the stored hash in brokers.security.keys (brokers check keys too)."""

from __future__ import annotations

import secrets

from tideway_server.brokers.security.keys import KEY_PREFIX, hash_secret, secret_matches, split_key

__all__ = ["KEY_PREFIX", "hash_secret", "new_key", "secret_matches", "split_key"]


def new_key() -> tuple[str, str, str]:
    """(full key, prefix, sha256 of the secret) for a fresh key."""
    prefix = secrets.token_hex(6)  # 12 hex characters: the public id of the key
    secret = secrets.token_urlsafe(32)  # 256 random bits
    return f"{KEY_PREFIX}{prefix}_{secret}", prefix, hash_secret(secret)
