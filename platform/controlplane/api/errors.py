"""One JSON shape for every API error.

    {"code": "quota_exceeded", "message": "the free plan allows 5 queues, and they all exist (quota max_queues)",
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
from rest_framework import exceptions
from rest_framework.response import Response
from tideway_server.controlplane.error_codes import lookup
from tideway_server.controlplane.errors import ActionError

from tideway.protocol.errors import BrokerError

log = logging.getLogger(__name__)


def not_found(what: str, *, code: str = "not_found") -> ActionError:
    return ActionError(code, f"{what} does not exist")


def error_body(code: str, message: str, details: dict | None = None) -> dict:
    """The one shape; ``error_code`` from the registry (controlplane/error_codes.py)."""
    body = {"code": code, "message": message, "error_code": lookup(code).error_code}
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
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status)
    if isinstance(exc, exceptions.ValidationError):
        details = exc.detail if isinstance(exc.detail, dict) else {"non_field_errors": exc.detail}
        return Response(error_body("invalid_request", _first_message(details), {"fields": details}), status=400)
    if isinstance(exc, exceptions.APIException):
        code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)),
                    "invalid_request" if exc.status_code < 500 else "internal_error")
        headers = {}
        if getattr(exc, "auth_header", None):
            headers["WWW-Authenticate"] = exc.auth_header
        if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
            headers["Retry-After"] = str(int(exc.wait) + 1)
        return Response(error_body(code, str(exc.detail)), status=lookup(code).status, headers=headers)
    if isinstance(exc, BrokerError):
        log.warning("broker cluster refused a management call: %s", exc)
        return Response(error_body("cluster_error", f"the broker cluster refused the change: {exc.message}"),
                        status=lookup("cluster_error").status)
    log.exception("unhandled error in %s", context.get("view").__class__.__name__ if context.get("view") else "a view")
    return Response(error_body("internal_error", "the server failed to handle this request; it was logged"), status=500)


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
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def json_500(request) -> JsonResponse:
    return JsonResponse(error_body("internal_error", "the server failed to handle this request; it was logged"), status=500)
