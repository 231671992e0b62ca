"""Small template helpers of the console."""

from datetime import UTC, datetime

from django import template
from django.utils.html import format_html, format_html_join

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
def stamp(milliseconds):
    """A record's time (ms since the epoch) as UTC text."""
    try:
        return datetime.fromtimestamp(int(milliseconds) / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
    except (TypeError, ValueError, OverflowError, OSError):
        return ""
