"""Schema parsing and compatibility checks, one module per schema type.

Each module offers ``parse(text) -> parsed`` (raising InvalidSchema) and
``reader_errors(reader, writer) -> list[str]``: why data written with
``writer`` could not be read with ``reader`` (empty when it can). The modes
are built on that one question:

* BACKWARD: the new schema reads data written with the previous one;
* FORWARD: the previous schema reads data written with the new one;
* FULL: both; *_TRANSITIVE: against every earlier version, not just the last;
* NONE: no check.
"""

from __future__ import annotations

from tideway_server.registry.compatibility import avro, json_schema, protobuf
from tideway_server.registry.compatibility.errors import InvalidSchema

__all__ = ["InvalidSchema", "LEVELS", "SCHEMA_TYPES", "check", "parse"]

SCHEMA_TYPES = {"AVRO": avro, "JSON": json_schema, "PROTOBUF": protobuf}
LEVELS = ("BACKWARD", "BACKWARD_TRANSITIVE", "FORWARD", "FORWARD_TRANSITIVE", "FULL", "FULL_TRANSITIVE", "NONE")


def parse(schema_type: str, text: str):
    return SCHEMA_TYPES[schema_type].parse(text)


def check(schema_type: str, level: str, new, previous: list) -> list[str]:
    """Why ``new`` is incompatible with ``previous`` (oldest first, parsed) under ``level``; [] if compatible."""
    if level == "NONE" or not previous:
        return []
    module = SCHEMA_TYPES[schema_type]
    against = previous if level.endswith("_TRANSITIVE") else previous[-1:]
    problems: list[str] = []
    for old in against:
        if level.startswith(("BACKWARD", "FULL")):
            problems += [f"backward: {p}" for p in module.reader_errors(new, old)]
        if level.startswith(("FORWARD", "FULL")):
            problems += [f"forward: {p}" for p in module.reader_errors(old, new)]
    return problems
