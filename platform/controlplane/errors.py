"""The error every control-plane action raises when it refuses a change."""

from __future__ import annotations

from tideway_server.controlplane.error_codes import lookup


class ActionError(Exception):
    """Raised when an action cannot be done; nothing was changed.

    ``code`` is the stable error code the API returns; its HTTP ``status`` and
    ``error_code`` come from the registry (controlplane/error_codes.py), which
    refuses a code it does not know.
    """

    def __init__(self, code: str, message: str, *, details: dict | None = None) -> None:
        super().__init__(message)
        entry = lookup(code)
        self.code, self.message, self.status, self.error_code = code, message, entry.status, entry.error_code
        self.details = details or {}
