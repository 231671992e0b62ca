"""AWS credentials of an API key, for the SQS endpoint (docs/sqs.md).

SigV4 needs the server to know the client's secret (it recomputes an HMAC), while API keys are stored hashed.
So the secret is derived, never stored: HMAC-SHA256 of the key's prefix and a per-key random salt under the
deployment's signing key (``SECRET_KEY``, the same on every gateway). Issuing credentials again makes a new salt
(the old secret stops working); revoking them clears it; revoking the API key revokes them too (the gateway
checks the key's state). The access key id names the key: ``TWAK`` and its prefix in capitals.
"""

from __future__ import annotations

import base64
import functools
import re

from django.conf import settings
from django.utils.crypto import salted_hmac

ACCESS_KEY_PREFIX = "TWAK"
_ACCESS_KEY_ID = re.compile(rf"^{ACCESS_KEY_PREFIX}([0-9A-F]{{12}})$")
_PURPOSE = "tideway.sqs.credentials"


def access_key_id(prefix: str) -> str:
    return f"{ACCESS_KEY_PREFIX}{prefix.upper()}"


def prefix_of(access_key: str) -> str | None:
    """The API key prefix an access key id names, or None when it names none."""
    found = _ACCESS_KEY_ID.match(access_key)
    return found.group(1).lower() if found else None


@functools.lru_cache(maxsize=4096)  # derived on every SQS request otherwise; a new salt is a new entry
def secret_access_key(prefix: str, salt: str) -> str:
    """40 characters, as AWS's secrets."""
    digest = salted_hmac(_PURPOSE, f"{prefix}:{salt}", secret=settings.SECRET_KEY, algorithm="sha256").digest()
    return base64.b64encode(digest).decode()[:40]
