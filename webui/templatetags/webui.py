"""Small template helpers of the console."""

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
