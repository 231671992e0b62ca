"""The error every control-plane action raises when it refuses a change."""

from __future__ import annotations


class ActionError(Exception):
    """Raised when an action cannot be done; nothing was changed.

    ``code`` is the stable error code the API returns, ``status`` its HTTP
    status and ``error_code`` a Confluent-style number (defaults to status).
    """

    def __init__(self, code: str, message: str, status: int = 400, *, error_code: int | None = None,
                 details: dict | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.status = code, message, status
        self.error_code = error_code or status
        self.details = details or {}
