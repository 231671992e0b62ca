"""Small template helpers of the console."""

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html, format_html_join
from tideway_server.controlplane import units

register = template.Library()


@register.filter
def get(mapping, key):
    """``mapping[key]`` or "" (form values by field name)."""
    return (mapping or {}).get(key, "")


@register.simple_tag
def field_errors(errors, field):
    """The API's messages for one field, under it."""
    messages = (errors or {}).get(field)
    if not messages:
        return ""
    return format_html('<div class="errors" role="alert">{}</div>', format_html_join(" ", "{}", ((m,) for m in messages)))


@register.filter
def size(count):
    """Bytes in KiB, MiB, GiB (1073741824 -> "1 GiB"); "" for nothing."""
    return "" if count in (None, "") else units.size(int(count))


@register.filter
def duration(milliseconds):
    """Milliseconds in the largest unit they fill (604800000 -> "7 days")."""
    return "" if milliseconds in (None, "") else units.duration_ms(int(milliseconds))


@register.filter
def money(cents, currency="USD"):
    """Cents in the currency's units (4900 -> "USD 49.00")."""
    return "" if cents in (None, "") else units.money(cents, currency or "USD")


@register.filter
def pairs(details):
    """An audit entry's details in words: "role: developer · scopes: consume, produce" (never a Python dict)."""
    if not isinstance(details, dict):
        return details or ""
    return " · ".join(f"{key}: {_words(value)}" for key, value in details.items())


def _words(value) -> str:
    if isinstance(value, list | tuple):
        return ", ".join(_words(v) for v in value) or "none"
    if isinstance(value, dict):
        return "; ".join(f"{k} {_words(v)}" for k, v in value.items())
    if value is None or value == "":
        return "none"
    return str(value)


def _moment(value) -> datetime | None:
    """A datetime from a datetime, an ISO text ("...Z" too) or milliseconds since the epoch; None otherwise."""
    try:
        if isinstance(value, datetime):
            return value if value.tzinfo else value.replace(tzinfo=UTC)
        if isinstance(value, int | float) or (isinstance(value, str) and value.isdigit()):
            return datetime.fromtimestamp(int(value) / 1000, UTC)
        if isinstance(value, str) and value:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        pass
    return None


def _time_element(moment: datetime, text: str, precise: bool):
    """``<time>`` in UTC; webui/times.js shows it in the viewer's time zone with a relative time beside it."""
    iso = moment.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    return format_html('<time datetime="{}"{}>{} UTC</time>', iso, " data-precise" if precise else "", text)


@register.filter
def when(value):
    """A moment (datetime, ISO text, or ms since the epoch) as a ``<time>`` the browser shows in the viewer's own
    time zone, with "5 minutes ago" beside it; UTC to the minute without JavaScript; "" for nothing."""
    moment = _moment(value)
    return "" if moment is None else _time_element(moment, moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M"), False)


@register.filter
def stamp(milliseconds):
    """A record's time (ms since the epoch) to the millisecond, as ``when`` shows it."""
    moment = _moment(milliseconds)
    if moment is None:
        return ""
    return _time_element(moment, moment.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3], True)
