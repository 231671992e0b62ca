"""Request routing of a server (a broker or the controller): frame in, answer out.

For every request, in this order: the API and its version are checked
against ``API_VERSIONS`` and this server's handlers, the body is decoded, the
``Authorizer`` decides (and, for a tenant, rewrites names), the handler runs,
and the answer is encoded, renamed for a tenant and timed. Errors become a
typed error body; a tenant's error messages lose broker-side name prefixes.
Nothing here raises.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import msgspec
from tideway_server.brokers.server.authorizer import Authorizer
from tideway_server.brokers.server.connection import Session

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.errors import BrokerError, InvalidRequestError, UnsupportedVersionError
from tideway.protocol.messages import ApiKey

__all__ = ["Route", "Router"]

log = logging.getLogger(__name__)

_APIS = {int(api): api for api in ApiKey}  # ApiKey(n) took 1.3 µs a request, a dict 0.1


@dataclass(frozen=True)
class Route:
    handler: Callable[..., Awaitable[msgspec.Struct | None]]
    takes_session: bool = False  # handler(request, session) instead of handler(request)
    # handler(request, more): more(response) sends an answer ahead of the one the handler returns,
    # renamed and encoded as that one is (a streaming fetch)
    answers_more: bool = False


class Router:
    def __init__(self, routes: dict[ApiKey, Route], authorizer: Authorizer, *, name: str,
                 observe: Callable[[ApiKey, float], None] | None = None) -> None:
        self.routes = routes
        self.authorizer = authorizer
        self.name = name  # "broker 1", "the controller": in error messages
        self._observe = observe

    async def dispatch(self, session: Session, api_key: int, api_version: int, correlation_id: int,
                       body: memoryview) -> bytes | None:
        started = time.perf_counter()
        api = _APIS.get(api_key)
        if api is None:
            return _error_body(UnsupportedVersionError(f"unknown API key {api_key}"), session)
        route = self.routes.get(api)
        if route is None:
            return _error_body(UnsupportedVersionError(f"{self.name} does not serve {api.name}"), session)
        low, high = m.API_VERSIONS[api]
        if not low <= api_version <= high:
            return _error_body(
                UnsupportedVersionError(f"{api.name} version {api_version} unsupported (supported {low}-{high})"), session)
        try:
            request = m.DECODERS[api].decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return _error_body(InvalidRequestError(f"cannot decode {api.name} request: {exc}"), session)
        try:
            response = await self._run(session, api, route, request, correlation_id)
        except BrokerError as exc:
            return _error_body(exc, session)
        except Exception as exc:
            log.exception("unexpected error handling %s", api.name)
            return _error_body(errors.UnknownServerError(f"{type(exc).__name__}: {exc}"), session)
        finally:
            if self._observe is not None:
                self._observe(api, time.perf_counter() - started)
        return None if response is None else m.ENCODER.encode(response)


    async def call(self, session: Session, api: ApiKey, request: msgspec.Struct) -> msgspec.Struct:
        """A decoded request through the authorizer and its handler, as ``dispatch`` runs one, for a listener that
        speaks another protocol and translates (the Kafka listener): the answer, renamed for a tenant. A refusal
        raises its BrokerError; a fetch answers once."""
        started = time.perf_counter()
        try:
            return await self._run(session, api, self.routes[api], request, None)
        except BrokerError as exc:
            exc.message = _scrubbed(exc.message, session)
            raise
        finally:
            if self._observe is not None:
                self._observe(api, time.perf_counter() - started)

    async def _run(self, session: Session, api: ApiKey, route: Route, request, correlation_id: int | None):
        after = await self.authorizer.authorize(session, api, request)
        if route.takes_session:
            response = await route.handler(request, session)
        elif route.answers_more:
            more = _no_more if correlation_id is None else _more(session, correlation_id, after)
            response = await route.handler(request, more)
        else:
            response = await route.handler(request)
        if after is not None:
            after(response)
        return response


def _no_more(response: msgspec.Struct) -> bool:
    return False


def _more(session: Session, correlation_id: int, after: Callable[[msgspec.Struct], None] | None):
    def more(response: msgspec.Struct) -> bool:
        """Write ``response`` ahead of the request's last answer; False if the connection is gone."""
        if after is not None:
            after(response)
        connection = session.connection
        return connection is not None and connection.answer(correlation_id, m.ENCODER.encode(response))

    return more


def _scrubbed(message: str, session: Session) -> str:
    """``message`` without broker-side name prefixes, for a tenant."""
    principal = session.principal
    if principal is not None and principal.names is not None:
        return principal.names.scrub(message)
    return message


def _error_body(exc: BrokerError, session: Session) -> bytes:
    return m.ENCODER.encode(m.ErrorResponse(error_code=exc.errno, error_message=_scrubbed(exc.message, session)))
