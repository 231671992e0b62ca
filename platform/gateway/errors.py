"""Refusals of the data gateway, in the one error shape of the API.

    {"code": "throttled", "message": "...", "error_code": 429, "details": {...}}

The same body travels in a WebSocket ``{"type": "error", ...}`` frame.
"""

from __future__ import annotations

import math

from django.http import JsonResponse
from tideway_server.controlplane.api.errors import error_body
from tideway_server.controlplane.error_codes import lookup


class GatewayError(Exception):
    """A data call refused; nothing was changed unless ``details`` says so. The status comes with the code
    (controlplane/error_codes.py)."""

    def __init__(self, code: str, message: str, *, details: dict | None = None,
                 retry_after_ms: int | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, lookup(code).status
        self.details = details or {}
        self.retry_after_ms = retry_after_ms

    def body(self) -> dict:
        return error_body(self.code, self.message, self.details)

    def response(self) -> JsonResponse:
        answer = JsonResponse(self.body(), status=self.status)
        if self.retry_after_ms is not None:
            answer["Retry-After"] = str(max(1, math.ceil(self.retry_after_ms / 1000)))
        if self.status == 401:
            answer["WWW-Authenticate"] = 'Bearer realm="tideway"'
        return answer


def queue_not_found(name: str) -> GatewayError:
    # The same answer whether the queue exists nowhere or belongs to another tenant.
    return GatewayError("queue_not_found", f"queue {name!r} does not exist")


def invalid(message: str, **details) -> GatewayError:
    return GatewayError("invalid_request", message, details=details or None)
