"""The server side of SASL_HANDSHAKE and SASL_AUTHENTICATE (see ``tideway/protocol/handshake.py``).

Which mechanisms a connection may use depends on where it came in:

* a broker's client listener: PLAIN with a tenant API key or a service key;
* a broker's internal listener: TIDEWAY-CLUSTER only (peers holding the cluster secret);
* a controller: TIDEWAY-CLUSTER (brokers, standby controllers) and PLAIN with a
  service key (operators, the control plane); never a tenant key.

A failed authentication is answered with SASL_AUTHENTICATION_FAILED and the
connection is closed after the answer.
"""

from __future__ import annotations

import hmac
import logging

import msgspec
from tideway_server.brokers.security.keys import KEY_PREFIX, SERVICE_KEY_PREFIX, service_name_of
from tideway_server.brokers.security.principal import Principal
from tideway_server.brokers.server.connection import Listener, Session
from tideway_server.brokers.server.credentials import CredentialStore
from tideway_server.brokers.server.limits import RateLimitedLog

from tideway.protocol import errors, handshake
from tideway.protocol import messages as m

__all__ = ["Authenticator"]

log = logging.getLogger(__name__)

_PROOF_DECODER = msgspec.msgpack.Decoder(handshake.ClusterProof)


class Authenticator:
    def __init__(
        self,
        *,
        cluster_secret: bytes,
        credentials: CredentialStore | None,
        mechanisms: dict[Listener, tuple[str, ...]],
        on_failure=lambda mechanism: None,
    ) -> None:
        self._cluster_secret = cluster_secret
        self._credentials = credentials  # None: tenant keys are refused here (the controller)
        self._mechanisms = mechanisms
        self._on_failure = on_failure
        self._log = RateLimitedLog(log)

    async def handshake(self, request: m.SaslHandshakeRequest, session: Session) -> m.SaslHandshakeResponse:
        if session.principal is not None:
            raise errors.InvalidRequestError("this connection has already authenticated")
        session.nonce = handshake.new_nonce()
        return m.SaslHandshakeResponse(mechanisms=list(self._mechanisms[session.listener]), nonce=session.nonce)

    async def authenticate(self, request: m.SaslAuthenticateRequest, session: Session) -> m.SaslAuthenticateResponse:
        try:
            if session.principal is not None:
                raise errors.InvalidRequestError("this connection has already authenticated")
            allowed = self._mechanisms[session.listener]
            if request.mechanism not in allowed:
                raise errors.UnsupportedSaslMechanismError(
                    f"the {session.listener.value} listener takes {', '.join(allowed)}, not {request.mechanism!r}")
            if request.mechanism == handshake.PLAIN_MECHANISM:
                principal, proof = await self._plain(request.auth_bytes), b""
            else:
                principal, proof = self._cluster(request.auth_bytes, session)
        except errors.BrokerError as exc:
            session.close_after_answer = True
            self._on_failure(request.mechanism)
            self._log.warning("authentication", "authentication from %s on the %s listener failed: %s",
                              session.peer, session.listener.value, exc.message)
            if isinstance(exc, errors.SaslAuthenticationFailedError):
                raise
            raise errors.SaslAuthenticationFailedError(exc.message) from None
        if not session.authenticated(principal):
            session.close_after_answer = True
            raise errors.SaslAuthenticationFailedError(f"{principal.name} has too many connections to this server")
        return m.SaslAuthenticateResponse(principal=principal.name, server_proof=proof)

    async def _plain(self, auth_bytes: bytes) -> Principal:
        parsed = handshake.parse_plain(auth_bytes)
        if parsed is None:
            raise errors.SaslAuthenticationFailedError("a PLAIN message is 0 user 0 password")
        _user, key = parsed
        if key.startswith(SERVICE_KEY_PREFIX):
            name = service_name_of(key, self._cluster_secret)
            if name is None:
                raise errors.SaslAuthenticationFailedError("the service key is not valid in this deployment")
            return Principal.service(name)
        if key.startswith(KEY_PREFIX):
            if self._credentials is None:
                raise errors.SaslAuthenticationFailedError("tenant API keys are not accepted here: use a service key")
            return await self._credentials.authenticate(key)
        if not key:
            raise errors.SaslAuthenticationFailedError("no API key given: pass one (api_key=, --api-key or TIDEWAY_API_KEY)")
        raise errors.SaslAuthenticationFailedError("the API key is malformed (expected tw_<12 hex>_<secret>)")

    def _cluster(self, auth_bytes: bytes, session: Session) -> tuple[Principal, bytes]:
        if not session.nonce:
            raise errors.SaslAuthenticationFailedError("TIDEWAY-CLUSTER needs a SASL_HANDSHAKE first (for its nonce)")
        try:
            proof = _PROOF_DECODER.decode(auth_bytes)
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise errors.SaslAuthenticationFailedError("malformed TIDEWAY-CLUSTER message") from None
        if len(proof.identity) > handshake.IDENTITY_BYTES_MAX or len(proof.client_nonce) != handshake.NONCE_BYTES:
            raise errors.SaslAuthenticationFailedError("malformed TIDEWAY-CLUSTER message")
        expected = handshake.client_proof(self._cluster_secret, session.nonce, proof.client_nonce, proof.identity)
        if not hmac.compare_digest(expected, proof.proof):
            raise errors.SaslAuthenticationFailedError("wrong cluster secret")
        answer = handshake.server_proof(self._cluster_secret, session.nonce, proof.client_nonce, proof.identity)
        return Principal.peer(proof.identity), answer
