"""Request body parsers: JSON, also under Confluent Schema Registry's media types."""

from __future__ import annotations

from rest_framework import parsers


class JSONParser(parsers.JSONParser):
    """application/json and the ``application/vnd.schemaregistry...+json`` types Confluent clients send."""

    media_type = "application/*"

    def parse(self, stream, media_type=None, parser_context=None):
        from rest_framework.exceptions import ParseError, UnsupportedMediaType

        if media_type and not (media_type.split(";")[0].strip().endswith("json")):
            raise UnsupportedMediaType(media_type)
        try:
            return super().parse(stream, media_type, parser_context)
        except ParseError as exc:
            raise ParseError(f"the request body is not valid JSON ({exc.detail})") from None
