"""The gateway's HTTP entry: its paths skip Django's middleware and request signals.

The data path does no per-request database work (keys, queues and schemas
come from short caches), does not use sessions, cookies or CSRF, and answers
in its own error shape; Django's middleware stack and the request
started/finished signals would each cost a thread hop per request (they are
synchronous). So ``/api/v1/tokens`` and ``/api/v1/queues/{name}/...`` go
straight to the gateway's views; everything else (the management API, the
registry, docs) goes to Django's usual ASGI handler.
"""

from __future__ import annotations

import io
import logging
import re

from django.conf import settings
from django.core.handlers.asgi import ASGIRequest
from django.urls import Resolver404, URLResolver
from django.urls.resolvers import RegexPattern
from tideway_server.controlplane.errors import ActionError
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.sqs import endpoint as sqs_endpoint

log = logging.getLogger(__name__)

GATEWAY_PATH = re.compile(r"^/api/v1/(tokens$|queues/[A-Za-z0-9._-]{1,100}/.)")


class GatewayHTTP:
    def __init__(self, fallback) -> None:
        self.fallback = fallback
        self.resolver = URLResolver(RegexPattern(r"^/api/v1/"), "tideway_server.gateway.urls")

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and sqs_endpoint.addressed_to_sqs(scope):
            return await sqs_endpoint.serve(scope, receive, send)
        if scope["type"] != "http" or not GATEWAY_PATH.match(scope["path"]):
            return await self.fallback(scope, receive, send)
        try:
            match = self.resolver.resolve(scope["path"])
        except Resolver404:
            return await self.fallback(scope, receive, send)
        body = await read_body(receive, settings.GATEWAY_MAX_BODY_BYTES)
        if body is None:
            response = GatewayError("request_too_large", f"the body is larger than {settings.GATEWAY_MAX_BODY_BYTES} bytes").response()
        else:
            request = ASGIRequest(scope, io.BytesIO(body))
            try:
                response = await match.func(request, *match.args, **match.kwargs)
            except ActionError as exc:  # a control-plane refusal met on the way (e.g. no broker known): its own code
                response = GatewayError(exc.code, exc.message, details=exc.details or None,
                                        retry_after_ms=1000 if exc.status == 503 else None).response()
            except Exception:
                log.exception("unhandled error in %s %s", scope.get("method"), scope["path"])
                response = GatewayError("internal_error", "the server failed to handle this request; it was logged").response()
        content = response.content
        headers = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in response.items()]
        headers.append((b"content-length", str(len(content)).encode()))  # not chunked: one write, simpler clients
        await send({"type": "http.response.start", "status": response.status_code, "headers": headers})
        await send({"type": "http.response.body", "body": content})


async def read_body(receive, limit: int) -> bytes | None:
    """The request body, or None once it passes ``limit`` bytes (the rest is not read)."""
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
