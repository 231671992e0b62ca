"""What every data call goes through: authentication, scope, queue patterns, rate limit, the queue lookup.

Views are async Django views (no DRF on the hot path): each handler is
``async def post(self, request, call, **kwargs)`` and reads ``call.caller``
and ``call.queue``. Refusals raise ``GatewayError``; broker failures become
503 ``unavailable`` (retry) or the matching 4xx.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponse, JsonResponse
from django.views import View
from django.views.decorators.csrf import csrf_exempt
from tideway_server.gateway import limits, operations
from tideway_server.gateway.auth import Caller, authenticate
from tideway_server.gateway.catalog import QueueInfo, queue_named
from tideway_server.gateway.errors import GatewayError, invalid, queue_not_found
from tideway_server.gateway.metering import meter
from tideway_server.gateway.wire import ENCODER

from tideway.protocol import errors as broker_errors

log = logging.getLogger(__name__)



@dataclass
class Call:
    caller: Caller
    queue: QueueInfo | None


def json_response(body, status: int = 200) -> HttpResponse:
    return HttpResponse(ENCODER.encode(body), status=status, content_type="application/json")


def broker_group(call: Call, group: str, kind: str) -> str:
    return operations.broker_group(call.caller, group, kind)


class GatewayView(View):
    """Base of every data endpoint.

    ``required_scopes``: HTTP method -> scope ("produce", "consume", "manage");
    ``queue_required``: the URL names a queue (``name``) that must exist.
    """

    required_scopes: dict[str, str] = {}
    queue_required = True
    # Methods whose handler takes the request from the rate limit itself, together with its bytes
    # (one Redis round trip instead of two).
    rate_limited_by_handler: frozenset[str] = frozenset()
    # Methods that deliver messages: refused while the tenant's consume bytes/s are in debt.
    consuming_methods: frozenset[str] = frozenset()
    http_method_names = ["get", "post", "put", "delete"]

    @classmethod
    def as_view(cls, **initkwargs):
        return csrf_exempt(super().as_view(**initkwargs))

    async def dispatch(self, request, *args, **kwargs):
        method = request.method.lower()
        handler = getattr(self, method, None) if method in self.http_method_names else None
        if handler is None:
            return JsonResponse(GatewayError("method_not_allowed", f"{request.method} is not allowed here").body(), status=405)
        call = None
        response = None
        try:
            call = await self.authorise(request, kwargs.get("name"))
            response = await handler(request, call, **kwargs)
            return response
        except GatewayError as exc:
            response = exc.response()
            return response
            return exc.response()
        except RequestDataTooBig:
            return GatewayError("request_too_large", f"the body is larger than {settings.GATEWAY_MAX_BODY_BYTES} bytes").response()
        except broker_errors.TidewayError as exc:
            log.info("%s %s: broker error %s", request.method, request.path, exc)
            response = operations.broker_failure(exc).response()
            return response
        finally:
            if call is not None:  # an authenticated request: the tenant's, whatever its outcome
                body = len(getattr(request, "_body", b""))  # what was read of it (a body over the limit never is)
                sent = len(response.content) if response is not None and not response.streaming else 0
                meter.count(call.queue, bytes_in=body, bytes_out=sent)

    async def authorise(self, request, name: str | None) -> Call:
        caller = await authenticate(request.headers.get("Authorization", ""), request.GET.get("token", ""))
        scope = self.required_scopes.get(request.method, "consume")
        if scope not in caller.principal.scopes:
            raise GatewayError("forbidden", f"this API key lacks the '{scope}' scope needed to {request.method} here")
        if name is not None and not caller.may_touch(name):
            raise GatewayError("forbidden", f"this API key may not use queue {name!r} (its queue patterns do not match)")
        if request.method not in self.rate_limited_by_handler:
            await limits.take(caller, requests=1, consuming=request.method in self.consuming_methods)
        queue = None
        if self.queue_required:
            queue = await queue_named(caller.tenant_id, name)
            if queue is None:
                raise queue_not_found(name)
        return Call(caller, queue)


def int_param(request, name: str, default: int | None, *, low: int = -(2**63), high: int = 2**63 - 1) -> int | None:
    raw = request.GET.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise invalid(f"query parameter {name} must be an integer, got {raw!r}") from None
    if not low <= value <= high:
        raise invalid(f"query parameter {name} must be between {low} and {high}, got {value}")
    return value

