"""Request body parsers: JSON, also under Confluent Schema Registry's media types."""

from __future__ import annotations

from rest_framework import parsers

# What ``curl -d`` sends: the body is read as JSON all the same, as the data gateway does.
FORM_MEDIA_TYPE = "application/x-www-form-urlencoded"


class JSONParser(parsers.JSONParser):
    """application/json, the ``application/vnd.schemaregistry...+json`` types Confluent clients send, and
    JSON sent as a form body (``curl -d``): the API takes JSON bodies only, whatever they are labelled."""

    media_type = "application/*"

    def parse(self, stream, media_type=None, parser_context=None):
        from rest_framework.exceptions import ParseError, UnsupportedMediaType

        base = (media_type or "").split(";")[0].strip()
        if base and not (base.endswith("json") or base == FORM_MEDIA_TYPE):
            raise UnsupportedMediaType(media_type)
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError as exc:
            raise ParseError(f"the request body is not valid JSON ({exc.detail})") from None
