"""Quantities in words people read: sizes in B, KiB, MiB, GiB, TiB and durations in ms, seconds, minutes, hours
and days, for messages and pages (a quota's "7 days", not "604800000")."""

from __future__ import annotations

__all__ = ["duration_ms", "money", "size"]

_SIZE_UNITS = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
_DURATIONS = ((86_400_000, "day"), (3_600_000, "hour"), (60_000, "minute"), (1_000, "second"))


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:,.1f}"


def size(count: int) -> str:
    """``count`` bytes in the largest binary unit it fills: 1073741824 -> "1 GiB", 1536 -> "1.5 KiB"."""
    value, unit = float(count), 0
    while abs(value) >= 1024 and unit < len(_SIZE_UNITS) - 1:
        value /= 1024
        unit += 1
    return f"{_number(round(value, 1))} {_SIZE_UNITS[unit]}"


def duration_ms(milliseconds: int) -> str:
    """A duration in the largest unit it fills: 604800000 -> "7 days", 90000 -> "1.5 minutes", 250 -> "250 ms"."""
    for unit_ms, name in _DURATIONS:
        if abs(milliseconds) >= unit_ms:
            value = round(milliseconds / unit_ms, 1)
            return f"{_number(value)} {name}{'' if value == 1 else 's'}"
    return f"{milliseconds} ms"


def money(cents, currency: str = "USD") -> str:
    """An amount in cents in its currency's units: 4900 -> "USD 49.00" (cents that are not whole round)."""
    return f"{currency} {float(cents) / 100:,.2f}"
