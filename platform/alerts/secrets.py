"""Webhook signing secrets: ``whsec_`` + base64 of 24 random bytes (the Standard Webhooks form), kept encrypted
with a key derived from the deployment's signing key (changing that key makes them unreadable: rotate them)."""

from __future__ import annotations

import base64
import hashlib
import secrets as random

from cryptography.fernet import Fernet, InvalidToken

PREFIX = "whsec_"


def new_secret() -> str:
    return PREFIX + base64.b64encode(random.token_bytes(24)).decode()


def secret_bytes(secret: str) -> bytes:
    """The HMAC key a secret stands for (what follows ``whsec_``, base64-decoded)."""
    return base64.b64decode(secret.removeprefix(PREFIX))


def _fernet() -> Fernet:
    from django.conf import settings

    return Fernet(base64.urlsafe_b64encode(hashlib.sha256(b"tideway webhook secrets\0" + settings.SECRET_KEY.encode()).digest()))


def seal(secret: str) -> str:
    return _fernet().encrypt(secret.encode()).decode()


def unseal(token: str) -> str | None:
    try:
        return _fernet().decrypt(token.encode()).decode()
    except InvalidToken:
        return None  # sealed under another signing key
