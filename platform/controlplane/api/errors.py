"""One JSON shape for every API error.

    {"code": "quota_exceeded", "message": "quota max_queues exceeded: ...",
     "error_code": 40301, "details": {...}}

``code`` is stable and meant for programs; ``message`` is for people;
``error_code`` is a number in the style of Confluent Schema Registry (HTTP
status, or status*100 + n where Confluent defines one), so its clients
understand registry errors; ``details`` is optional (field errors, the
quota that was hit).
"""

from __future__ import annotations

import logging

from django.http import JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from controlplane.errors import ActionError
from tideway.protocol.errors import BrokerError
from topics.quotas import QuotaExceeded

log = logging.getLogger(__name__)


def not_found(what: str, *, code: str = "not_found") -> ActionError:
    return ActionError(code, f"{what} does not exist", 404)


def error_body(code: str, message: str, error_code: int, details: dict | None = None) -> dict:
    body = {"code": code, "message": message, "error_code": error_code}
    if details:
        body["details"] = details
    return body


_DRF_CODES = {
    exceptions.ParseError: "malformed_request",
    exceptions.AuthenticationFailed: "invalid_credentials",
    exceptions.NotAuthenticated: "unauthenticated",
    exceptions.PermissionDenied: "forbidden",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def exception_handler(exc: Exception, context: dict) -> Response:
    """DRF's EXCEPTION_HANDLER: every error leaves in the one shape."""
    from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
    from django.http import Http404

    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if isinstance(exc, ActionError):
        return Response(error_body(exc.code, exc.message, exc.error_code, exc.details), status=exc.status)
    if isinstance(exc, QuotaExceeded):
        details = {"quota": exc.quota, "limit": exc.limit, "requested": exc.requested}
        return Response(error_body("quota_exceeded", exc.message, 40301, details), status=status.HTTP_403_FORBIDDEN)
    if isinstance(exc, exceptions.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return Response(error_body("invalid_request", _first_message(details), 400, {"fields": details}), status=400)
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            headers["Retry-After"] = str(int(exc.wait) + 1)
        return Response(error_body(code, str(exc.detail), exc.status_code), status=exc.status_code, headers=headers)
    if isinstance(exc, BrokerError):
        log.warning("broker cluster refused a management call: %s", exc)
        return Response(error_body("cluster_error", f"the broker cluster refused the change: {exc.message}", 50201),
                        status=status.HTTP_502_BAD_GATEWAY)
    log.exception("unhandled error in %s", context.get("view").__class__.__name__ if context.get("view") else "a view")
    return Response(error_body("internal_error", "the server failed to handle this request; it was logged", 50001),
                    status=500)


def _first_message(details) -> str:
    """A one-line summary of DRF field errors, for people."""
    for field, errors_ in details.items() if isinstance(details, dict) else []:
        first = errors_[0] if isinstance(errors_, list) and errors_ else errors_
        if isinstance(first, dict):
            return f"{field}: {_first_message(first)}"
        return f"{field}: {first}" if field != "non_field_errors" else str(first)
    return "the request is not valid"


def json_404(request, exception=None) -> JsonResponse:
    """handler404: unknown URLs answer in the same shape."""
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}", 404), status=404)


def json_500(request) -> JsonResponse:
    return JsonResponse(error_body("internal_error", "the server failed to handle this request; it was logged", 50001), status=500)
