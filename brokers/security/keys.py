"""Credential strings: tenants' API keys, service keys, and the deployment's cluster secret.

A tenant API key is ``tw_<prefix>_<secret>``: the 12-hex ``prefix`` names the
key, the secret is 256 random bits. Only the SHA-256 of the secret is stored
anywhere (a fast hash is as safe as a slow one for 256 random bits, and keeps
authentication cheap).

A service key is ``tws_<name>_<proof>`` with ``proof`` = HMAC-SHA256(cluster
secret, name): the gateway, Celery, the control plane and operators act with
one. A broker checks it by computing the HMAC again, so no list of service keys
exists to leak; rotating the cluster secret revokes every service key.

The cluster secret (32 random bytes, kept as 64 hex characters) is generated
once per deployment: internal peers (brokers, controllers) prove they hold it
(``handshake``), and service keys derive from it. It is read from
``TIDEWAY_CLUSTER_SECRET``, else from a file (mode 0600).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
from pathlib import Path

__all__ = [
    "CLUSTER_SECRET_ENV",
    "KEY_PREFIX",
    "SERVICE_KEY_PREFIX",
    "ClusterSecretError",
    "hash_secret",
    "load_cluster_secret",
    "create_secret_file",
    "load_or_create_cluster_secret",
    "secret_matches",
    "service_key",
    "service_name_of",
    "split_key",
]

KEY_PREFIX = "tw_"
SERVICE_KEY_PREFIX = "tws_"
CLUSTER_SECRET_ENV = "TIDEWAY_CLUSTER_SECRET"
CLUSTER_SECRET_FILE = "cluster-secret"  # under $TIDEWAY_HOME
CLUSTER_SECRET_BYTES = 32
_SERVICE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}$")
_SERVICE_KEY_CONTEXT = b"tideway service key\x00"


class ClusterSecretError(Exception):
    """Raised when the cluster secret is missing or malformed."""


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(key: str) -> tuple[str, str] | None:
    """(prefix, secret) of a well-formed tenant API key, else None."""
    if not key.startswith(KEY_PREFIX):
        return None
    prefix, sep, secret = key[len(KEY_PREFIX):].partition("_")
    if not sep or len(prefix) != 12 or not secret:
        return None
    return prefix, secret


def secret_matches(secret: str, stored_sha256: str) -> bool:
    return hmac.compare_digest(hash_secret(secret), stored_sha256)


def service_key(cluster_secret: bytes, name: str) -> str:
    """The service key of principal ``name`` (e.g. ``gateway``, ``operator``) in this deployment."""
    if not _SERVICE_NAME.match(name):
        raise ValueError(f"service name {name!r} must be 1-32 lower-case letters, digits or '-'")
    proof = hmac.new(cluster_secret, _SERVICE_KEY_CONTEXT + name.encode(), hashlib.sha256).hexdigest()
    return f"{SERVICE_KEY_PREFIX}{name}_{proof}"


def service_name_of(key: str, cluster_secret: bytes) -> str | None:
    """The service name a service key acts as, or None when it is not one of this deployment's."""
    if not key.startswith(SERVICE_KEY_PREFIX):
        return None
    name, sep, _proof = key[len(SERVICE_KEY_PREFIX):].rpartition("_")
    if not sep or not _SERVICE_NAME.match(name):
        return None
    return name if hmac.compare_digest(service_key(cluster_secret, name), key) else None


def _parse_secret(text: str, where: str) -> bytes:
    text = text.strip()
    try:
        secret = bytes.fromhex(text)
    except ValueError:
        raise ClusterSecretError(f"the cluster secret in {where} is not hex") from None
    if len(secret) < 16:
        raise ClusterSecretError(f"the cluster secret in {where} is too short (at least 32 hex characters)")
    return secret


def load_cluster_secret(path: str | Path | None = None) -> bytes:
    """The cluster secret from $TIDEWAY_CLUSTER_SECRET, else from ``path``; ClusterSecretError if neither."""
    value = os.environ.get(CLUSTER_SECRET_ENV)
    if value:
        return _parse_secret(value, f"${CLUSTER_SECRET_ENV}")
    if path is None:
        raise ClusterSecretError(f"no cluster secret: set ${CLUSTER_SECRET_ENV} or name its file")
    try:
        return _parse_secret(Path(path).read_text(), str(path))
    except FileNotFoundError:
        raise ClusterSecretError(f"no cluster secret at {path} (and ${CLUSTER_SECRET_ENV} is not set)") from None


def load_or_create_cluster_secret(path: str | Path) -> tuple[bytes, bool]:
    """(secret, created): the secret as ``load_cluster_secret`` finds it, else a new one written to ``path`` (0600)."""
    try:
        return load_cluster_secret(path), False
    except ClusterSecretError:
        if os.environ.get(CLUSTER_SECRET_ENV) or Path(path).exists():
            raise  # present but malformed: never replace it silently
    created = create_secret_file(path, CLUSTER_SECRET_BYTES)
    return load_cluster_secret(path), created


def create_secret_file(path: str | Path, random_bytes: int) -> bool:
    """Write ``random_bytes`` fresh random bytes as hex to ``path`` (mode 0600) unless it exists; True if written."""
    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = secrets.token_bytes(random_bytes)
    # Written whole to a temporary file, then linked into place: link() fails when the name
    # exists, so of two processes starting at once one wins and the other reads the winner's.
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(secret.hex() + "\n")
        f.flush()
        os.fsync(f.fileno())
    try:
        os.link(temporary, path)
    except FileExistsError:
        return False
    finally:
        temporary.unlink(missing_ok=True)
    return True
