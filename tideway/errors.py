"""The error the SDK raises for a refused call: the gateway's error shape, as an exception."""

from __future__ import annotations


class ApiError(Exception):
    """``status`` (HTTP), ``code`` (stable, e.g. "throttled"), ``message`` (for people), ``details``."""

    def __init__(self, status: int, code: str, message: str, details: dict | None = None) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message
        self.details = details or {}

    @property
    def transient(self) -> bool:
        """Worth retrying as it is: throttled, or the service was briefly unavailable."""
        return self.status in (429, 502, 503, 504) or self.code == "publish_in_progress"
