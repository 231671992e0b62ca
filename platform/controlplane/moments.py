"""Times given in requests (``from``, ``to``): ISO 8601, UTC when no offset is given."""

from __future__ import annotations

from datetime import UTC, datetime

from tideway_server.controlplane.errors import ActionError


def moment(text: str, name: str) -> datetime:
    """``text`` as an aware UTC datetime; 400 ``invalid_request`` naming the parameter when it is not a time."""
    try:
        parsed = datetime.fromisoformat(text)
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    except (ValueError, OverflowError):
        raise ActionError("invalid_request", f"{name} is a date or time in ISO 8601 (2026-11-01, 2026-11-01T12:00Z), "
                          f"not {text!r}", details={"field": name}) from None
