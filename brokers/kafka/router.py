"""Every request on a Kafka listener: header, version check, authentication gate, body, handler, answer.

The connection (``brokers/server/connection.py``, in ordered mode: Kafka clients match answers to requests by
their order on the connection) hands each frame here. In this order:

* ApiVersions is answered at any version: one this listener serves gets the table of ``wire.SUPPORTED``;
  a newer one gets KIP-511's answer in v0's shape (UNSUPPORTED_VERSION and the table), so the client retries.
* Another API or version this listener does not serve is answered in that version's own response shape with
  UNSUPPORTED_VERSION, where the shape has a top-level error field (Metadata v13, Fetch v13+, JoinGroup v6+,
  DescribeTopicPartitions, ...: ``wire.unsupported_version_answer``), and the connection stays open; where it
  has none (errors only per topic or partition, or an API or version Kafka itself does not define) the
  connection is closed, as a Kafka broker closes it for every unsupported version. A client learns what is
  served from ApiVersions and sends neither.
* Until the connection has authenticated (SASL/PLAIN), only ApiVersions, SaslHandshake and SaslAuthenticate:
  anything else closes it.
* The body is decoded (a malformed one closes the connection: its stream cannot be trusted), the handler of
  ``apis.KafkaApis`` answers, the answer is encoded in the request's version.
"""

from __future__ import annotations

import logging

from kio.schema.errors import ErrorCode
from tideway_server.brokers.kafka import wire
from tideway_server.brokers.kafka.answers import NO_THROTTLE, build, item_type
from tideway_server.brokers.kafka.apis import KafkaApis
from tideway_server.brokers.server.connection import Session

__all__ = ["KafkaRouter"]

log = logging.getLogger(__name__)

API_VERSIONS = 18
BEFORE_AUTHENTICATION = frozenset({17, 18, 36})  # SaslHandshake, ApiVersions, SaslAuthenticate


class KafkaRouter:
    def __init__(self, apis: KafkaApis) -> None:
        self._apis = apis

    async def dispatch(self, session: Session, api_key: int, api_version: int, correlation_id: int,
                       rest: memoryview) -> bytes | None:
        if api_key == API_VERSIONS and not wire.supported(api_key, api_version):
            return wire.api_versions_error(api_version)
        if not wire.supported(api_key, api_version):
            what = f"{wire.API_NAMES.get(api_key, f'API {api_key}')} v{api_version}"
            answer = wire.unsupported_version_answer(api_key, api_version)
            if answer is not None:
                log.info("answered %s from %s with UNSUPPORTED_VERSION (see ApiVersions)", what, session.peer)
                return answer
            return self._hang_up(session, f"{what} is not served here (see ApiVersions), and its answer has no "
                                          "error field to say so in")
        if session.principal is None and api_key not in BEFORE_AUTHENTICATION:
            return self._hang_up(session, f"{wire.API_NAMES.get(api_key, api_key)} before SASL authentication")
        try:
            header = wire.parse_header(api_key, api_version, correlation_id, rest)
            request = wire.decode_request(header, rest)
        except Exception as exc:  # noqa: BLE001 - kio raises several kinds; the stream is untrustworthy after any
            return self._hang_up(session, f"a malformed {wire.API_NAMES.get(api_key, api_key)} v{api_version} "
                                          f"request: {exc}")
        response_type = wire.response_type(api_key, api_version)
        try:
            if api_key == API_VERSIONS:
                response = self._api_versions(response_type)
            else:
                response = await self._apis.handlers[api_key](request, response_type, session)
        except Exception:
            log.exception("Kafka %s v%d from %s failed", wire.API_NAMES.get(api_key, api_key), api_version,
                          session.peer)
            session.close_after_answer = True
            return None
        return None if response is None else wire.encode_response(response)

    @staticmethod
    def _api_versions(response_type):
        entry = item_type(response_type, "api_keys")
        return build(response_type, error_code=ErrorCode.none, throttle_time=NO_THROTTLE, api_keys=tuple(
            build(entry, api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted(wire.SUPPORTED.items())))

    @staticmethod
    def _hang_up(session: Session, why: str) -> None:
        log.info("closing the Kafka connection from %s: %s", session.peer, why)
        session.close_after_answer = True
        return None
