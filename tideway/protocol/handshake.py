"""The mutual proof internal peers (brokers, controllers) authenticate with.

SASL-style, in two requests on a fresh connection:

1. ``SASL_HANDSHAKE``: the server answers the mechanisms it takes on this
   listener and a fresh random ``server_nonce`` (16 bytes) for this connection.
2. ``SASL_AUTHENTICATE`` with mechanism ``TIDEWAY-CLUSTER`` and, msgpack-encoded,
   ``{identity, client_nonce, proof}`` where::

       proof        = HMAC-SHA256(cluster secret, "client" 0 server_nonce client_nonce identity)
       server_proof = HMAC-SHA256(cluster secret, "server" 0 server_nonce client_nonce identity)

   The server checks ``proof`` and answers ``server_proof``, which the client
   checks in turn: each side learns the other holds the cluster secret, and
   the secret never crosses the wire. A recorded exchange cannot be replayed,
   because the server's nonce is new on every connection. An epoch carried by
   a request is a fence against stale controllers, never a credential.

Tenants and services use ``PLAIN`` (RFC 4616: ``authzid 0 authcid 0 password``,
with the API key or service key as the password) on the client listener.
Without TLS a PLAIN password crosses the wire in clear, as with HTTP Bearer
keys: use TLS on any network you do not own.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import msgspec

__all__ = ["CLUSTER_MECHANISM", "PLAIN_MECHANISM", "ClusterProof", "client_proof", "encode_plain", "new_nonce",
           "parse_plain", "server_proof"]

PLAIN_MECHANISM = "PLAIN"
CLUSTER_MECHANISM = "TIDEWAY-CLUSTER"
NONCE_BYTES = 16
IDENTITY_BYTES_MAX = 64


class ClusterProof(msgspec.Struct, kw_only=True):
    identity: str  # e.g. "broker-2", "controller": for logs only; every holder of the secret is a peer
    client_nonce: bytes
    proof: bytes


def new_nonce() -> bytes:
    return secrets.token_bytes(NONCE_BYTES)


def _mac(secret: bytes, side: bytes, server_nonce: bytes, client_nonce: bytes, identity: str) -> bytes:
    message = side + b"\x00" + server_nonce + client_nonce + identity.encode()
    return hmac.new(secret, message, hashlib.sha256).digest()


def client_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes, identity: str) -> bytes:
    return _mac(secret, b"client", server_nonce, client_nonce, identity)


def server_proof(secret: bytes, server_nonce: bytes, client_nonce: bytes, identity: str) -> bytes:
    return _mac(secret, b"server", server_nonce, client_nonce, identity)


def encode_plain(password: str, username: str = "") -> bytes:
    return b"\x00" + username.encode() + b"\x00" + password.encode()


def parse_plain(auth_bytes: bytes) -> tuple[str, str] | None:
    """(username, password) of a PLAIN message, or None when malformed."""
    parts = bytes(auth_bytes).split(b"\x00")
    if len(parts) != 3:
        return None
    try:
        return parts[1].decode(), parts[2].decode()
    except UnicodeDecodeError:
        return None
