"""JSON Schema: validation of the schema itself (jsonschema), and compatibility.

The reader can read the writer's data when every document valid under the
writer is valid under the reader. Checked structurally, as Confluent's
registry does it: types may widen (integer to number) but not narrow;
a property the reader requires must be required by the writer; a property
added to the reader is fine only when the writer's content model is closed
(additionalProperties false), since an open writer may already send that
property with any value; a property the writer has and a closed reader
lacks is refused; enums may only grow; numeric and length bounds may only
loosen; arrays check their items; local $refs are followed. Keywords this
check does not model must be equal on both sides.
"""

from __future__ import annotations

import json

import jsonschema
from jsonschema.exceptions import SchemaError
from tideway_server.registry.compatibility.errors import InvalidSchema

MODELLED = {"type", "properties", "required", "additionalProperties", "enum", "items", "$ref", "$schema", "$id",
            "title", "description", "default", "examples", "definitions", "$defs", "minimum", "maximum",
            "exclusiveMinimum", "exclusiveMaximum", "minLength", "maxLength", "minItems", "maxItems", "format",
            "$comment", "const", "oneOf", "anyOf"}
LOWER_BOUNDS = ("minimum", "exclusiveMinimum", "minLength", "minItems")
UPPER_BOUNDS = ("maximum", "exclusiveMaximum", "maxLength", "maxItems")


class Parsed:
    def __init__(self, schema) -> None:
        self.schema = schema


def parse(text: str) -> Parsed:
    try:
        schema = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise InvalidSchema(f"invalid JSON Schema: not JSON ({exc})") from None
    if not isinstance(schema, dict | bool):
        raise InvalidSchema("invalid JSON Schema: a schema is an object or a boolean")
    try:
        jsonschema.validators.validator_for(schema if isinstance(schema, dict) else {}).check_schema(schema)
    except SchemaError as exc:
        raise InvalidSchema(f"invalid JSON Schema: {exc.message}") from None
    return Parsed(schema)


def reader_errors(reader: Parsed, writer: Parsed) -> list[str]:
    problems: list[str] = []
    _check(reader.schema, writer.schema, reader.schema, writer.schema, "", problems, 0)
    return problems


def _deref(node, root):
    for _ in range(32):  # bounded: a $ref chain longer than this is refused below
        if not isinstance(node, dict) or "$ref" not in node:
            return node
        ref = node["$ref"]
        if not ref.startswith("#"):
            return {}  # a remote reference: not followed
        target = root
        for part in [p for p in ref[1:].split("/") if p]:
            target = target.get(part.replace("~1", "/").replace("~0", "~"), {}) if isinstance(target, dict) else {}
        node = target
    return node


def _types(node) -> set[str] | None:
    kind = node.get("type")
    if kind is None:
        return None
    types = {kind} if isinstance(kind, str) else set(kind)
    if "number" in types:
        types.add("integer")
    return types


def _check(reader, writer, rroot, wroot, path: str, problems: list[str], depth: int) -> None:
    where = path or "/"
    if depth > 64:
        problems.append(f"{where}: schema nesting too deep to compare")
        return
    reader, writer = _deref(reader, rroot), _deref(writer, wroot)
    if reader is True or reader == {}:
        return
    if writer is True or writer == {}:
        problems.append(f"{where}: the writer accepts anything and the reader does not")
        return
    if reader is False or writer is False:
        if reader is False and writer is not False:
            problems.append(f"{where}: the reader accepts nothing")
        return
    for combinator in ("oneOf", "anyOf"):
        if combinator in writer:
            for i, branch in enumerate(writer[combinator]):
                _check(reader, branch, rroot, wroot, f"{path}/{combinator}[{i}]", problems, depth + 1)
            return
        if combinator in reader:
            if not any(_compatible(b, writer, rroot, wroot, path, depth) for b in reader[combinator]):
                problems.append(f"{where}: no branch of the reader's {combinator} reads the writer's schema")
            return
    rtypes, wtypes = _types(reader), _types(writer)
    if rtypes is not None:
        if wtypes is None:
            problems.append(f"{where}: the reader requires type {sorted(rtypes)}, the writer allows any")
        elif not wtypes <= rtypes:
            problems.append(f"{where}: type changed from {sorted(wtypes)} to {sorted(rtypes)}")
    if "enum" in reader:
        if "enum" not in writer:
            problems.append(f"{where}: the reader added an enum")
        elif not all(v in reader["enum"] for v in writer["enum"]):
            problems.append(f"{where}: enum values removed")
    if "const" in reader and writer.get("const", object()) != reader["const"]:
        problems.append(f"{where}: the reader added or changed const")
    for bound in LOWER_BOUNDS:
        if bound in reader and (bound not in writer or writer[bound] < reader[bound]):
            problems.append(f"{where}: {bound} tightened")
    for bound in UPPER_BOUNDS:
        if bound in reader and (bound not in writer or writer[bound] > reader[bound]):
            problems.append(f"{where}: {bound} tightened")
    for keyword in set(reader) - MODELLED:
        if reader.get(keyword) != writer.get(keyword):
            problems.append(f"{where}: {keyword} changed")
    _check_object(reader, writer, rroot, wroot, path, problems, depth)
    if "items" in reader and isinstance(reader["items"], dict | bool):
        _check(reader["items"], writer.get("items", True), rroot, wroot, f"{path}[]", problems, depth + 1)


def _check_object(reader, writer, rroot, wroot, path, problems, depth) -> None:
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    missing_required = set(reader.get("required", [])) - set(writer.get("required", []))
    for name in sorted(missing_required):
        problems.append(f"{path}/{name}: required by the reader, not by the writer")
    writer_closed = writer.get("additionalProperties", True) is False
    reader_additional = reader.get("additionalProperties", True)
    for name, schema in rprops.items():
        if name in wprops:
            _check(schema, wprops[name], rroot, wroot, f"{path}/{name}", problems, depth + 1)
        elif not writer_closed:
            writer_additional = writer.get("additionalProperties", True)
            _check(schema, writer_additional, rroot, wroot, f"{path}/{name}", problems, depth + 1)
    for name, schema in wprops.items():
        if name not in rprops:
            _check(reader_additional, schema, rroot, wroot, f"{path}/{name}", problems, depth + 1)
    if not writer_closed and reader_additional is not True and reader_additional != {}:
        _check(reader_additional, writer.get("additionalProperties", True), rroot, wroot, f"{path}/*", problems, depth + 1)


def _compatible(reader, writer, rroot, wroot, path, depth) -> bool:
    problems: list[str] = []
    _check(reader, writer, rroot, wroot, path, problems, depth + 1)
    return not problems
