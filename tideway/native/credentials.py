"""What a client proves on each new connection (see ``tideway/protocol/handshake.py``).

* ``ApiKey``: PLAIN with a tenant API key (``tw_...``) or a service key
  (``tws_...``), on a broker's client listener (service keys also on a controller);
* ``ClusterPeer``: TIDEWAY-CLUSTER with the deployment's cluster secret, on
  internal listeners and controllers; the server proves it holds the secret too.

``default_credentials`` is what clients use when given none: ``$TIDEWAY_API_KEY``.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass, field

import msgspec

from tideway.protocol import errors, handshake
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey as Api

__all__ = ["API_KEY_ENV", "ApiKey", "ClusterPeer", "Credentials", "default_credentials"]

API_KEY_ENV = "TIDEWAY_API_KEY"
AUTHENTICATION_TIMEOUT_S = 10.0


class Credentials:
    async def authenticate(self, connection) -> str:
        """Authenticate ``connection`` (a fresh ``tideway.native.conn.Connection``); return the principal's name."""
        raise NotImplementedError


@dataclass(frozen=True)
class ApiKey(Credentials):
    key: str = field(repr=False)

    async def authenticate(self, connection) -> str:
        await connection.request(Api.SASL_HANDSHAKE, m.SaslHandshakeRequest(mechanism=handshake.PLAIN_MECHANISM),
                                 timeout_s=AUTHENTICATION_TIMEOUT_S)
        answer: m.SaslAuthenticateResponse = await connection.request(
            Api.SASL_AUTHENTICATE,
            m.SaslAuthenticateRequest(mechanism=handshake.PLAIN_MECHANISM, auth_bytes=handshake.encode_plain(self.key)),
            timeout_s=AUTHENTICATION_TIMEOUT_S,
        )
        return answer.principal


@dataclass(frozen=True)
class ClusterPeer(Credentials):
    secret: bytes = field(repr=False)
    identity: str = "peer"

    async def authenticate(self, connection) -> str:
        hello: m.SaslHandshakeResponse = await connection.request(
            Api.SASL_HANDSHAKE, m.SaslHandshakeRequest(mechanism=handshake.CLUSTER_MECHANISM), timeout_s=AUTHENTICATION_TIMEOUT_S)
        client_nonce = handshake.new_nonce()
        proof = handshake.ClusterProof(
            identity=self.identity, client_nonce=client_nonce,
            proof=handshake.client_proof(self.secret, hello.nonce, client_nonce, self.identity),
        )
        answer: m.SaslAuthenticateResponse = await connection.request(
            Api.SASL_AUTHENTICATE,
            m.SaslAuthenticateRequest(mechanism=handshake.CLUSTER_MECHANISM, auth_bytes=msgspec.msgpack.encode(proof)),
            timeout_s=AUTHENTICATION_TIMEOUT_S,
        )
        expected = handshake.server_proof(self.secret, hello.nonce, client_nonce, self.identity)
        if not hmac.compare_digest(expected, answer.server_proof):
            raise errors.SaslAuthenticationFailedError(
                f"{connection.host}:{connection.port} could not prove it holds the cluster secret")
        return answer.principal


def default_credentials() -> Credentials | None:
    key = os.environ.get(API_KEY_ENV, "").strip()
    return ApiKey(key) if key else None


def credentials_for(api_key: str | None, credentials: Credentials | None) -> Credentials | None:
    """Explicit credentials, else an explicit key, else ``$TIDEWAY_API_KEY``, else none."""
    if credentials is not None:
        return credentials
    if api_key:
        return ApiKey(api_key)
    return default_credentials()
