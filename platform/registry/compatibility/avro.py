"""Avro: parsing with fastavro, and the spec's schema resolution rules for compatibility.

A reader can read a writer's data when (Avro specification, "Schema
Resolution"): primitive types are equal or the writer's is promotable (int to
long, float or double; long to float or double; float to double; string and
bytes both ways); records have the same name and every reader field either
exists in the writer (by name or alias) with a readable type, or has a
default; enums keep the writer's symbols (or the reader has a default);
arrays, maps and fixed match in items, values and size; every branch of a
writer union is readable by the reader.
"""

from __future__ import annotations

import json

import fastavro
from fastavro.schema import SchemaParseException, UnknownType
from tideway_server.registry.compatibility.errors import InvalidSchema

PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
PROMOTIONS = {"int": {"long", "float", "double"}, "long": {"float", "double"}, "float": {"double"},
              "string": {"bytes"}, "bytes": {"string"}}


class Parsed:
    """An Avro schema as JSON plus its named types by full name."""

    def __init__(self, schema) -> None:
        self.schema = schema
        self.names: dict[str, dict] = {}
        self._collect(schema, "")

    def _collect(self, node, namespace: str) -> None:
        if isinstance(node, list):
            for branch in node:
                self._collect(branch, namespace)
        elif isinstance(node, dict):
            kind = node.get("type")
            if kind in ("record", "error", "enum", "fixed"):
                full = _full_name(node["name"], node.get("namespace", namespace))
                self.names[full] = node
                namespace = full.rpartition(".")[0]
                for field in node.get("fields", []):
                    self._collect(field["type"], namespace)
            elif kind == "array":
                self._collect(node["items"], namespace)
            elif kind == "map":
                self._collect(node["values"], namespace)
            elif isinstance(kind, dict | list):
                self._collect(kind, namespace)


def _full_name(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def parse(text: str) -> Parsed:
    try:
        schema = json.loads(text)
    except (TypeError, ValueError):
        schema = text  # a bare primitive name such as string is also a schema
    _require_record_fields(schema)
    try:
        fastavro.parse_schema(schema, _write_hint=False, _force=True)
    except (SchemaParseException, UnknownType, TypeError, KeyError, ValueError, AttributeError) as exc:
        raise InvalidSchema(f"invalid Avro schema: {exc}") from None
    return Parsed(schema)


def _require_record_fields(node) -> None:
    """fastavro lets a record without "fields" pass as an empty record; the Avro spec requires them."""
    if isinstance(node, list):
        for branch in node:
            _require_record_fields(branch)
    elif isinstance(node, dict):
        if node.get("type") in ("record", "error"):
            if not isinstance(node.get("fields"), list):
                raise InvalidSchema(f"invalid Avro schema: record {node.get('name')!r} has no \"fields\" list")
            for field in node["fields"]:
                if isinstance(field, dict):
                    _require_record_fields(field.get("type"))
        elif node.get("type") in ("array", "map"):
            _require_record_fields(node.get("items", node.get("values")))
        elif isinstance(node.get("type"), dict | list):
            _require_record_fields(node["type"])


def reader_errors(reader: Parsed, writer: Parsed) -> list[str]:
    problems: list[str] = []
    _check(reader.schema, writer.schema, reader, writer, "", problems, set())
    return problems


def _resolve(node, parsed: Parsed, namespace: str = ""):
    """A schema node as a dict with a "type", named references looked up."""
    if isinstance(node, str):
        if node in PRIMITIVES:
            return {"type": node}
        return parsed.names.get(node) or parsed.names.get(_full_name(node, namespace)) or {"type": node}
    if isinstance(node, dict) and isinstance(node.get("type"), str) and node["type"] not in PRIMITIVES | {
            "record", "error", "enum", "fixed", "array", "map"}:
        return _resolve(node["type"], parsed, namespace)
    if isinstance(node, dict) and isinstance(node.get("type"), dict | list):
        return _resolve(node["type"], parsed, namespace)
    return node


def _kind(node) -> str:
    if isinstance(node, list):
        return "union"
    return "record" if node["type"] == "error" else node["type"]


def _check(reader, writer, rp: Parsed, wp: Parsed, path: str, problems: list[str], seen: set) -> None:
    reader, writer = _resolve(reader, rp), _resolve(writer, wp)
    where = path or "/"
    if _kind(writer) == "union":
        for branch in writer:
            if not _readable(reader, branch, rp, wp, path, seen):
                problems.append(f"{where}: the reader cannot read the writer's union branch {_describe(branch, wp)}")
        return
    if _kind(reader) == "union":
        if not any(_readable(branch, writer, rp, wp, path, seen) for branch in reader):
            problems.append(f"{where}: no branch of the reader's union reads the writer's {_describe(writer, wp)}")
        return
    rk, wk = _kind(reader), _kind(writer)
    if rk != wk:
        if wk in PROMOTIONS and rk in PROMOTIONS[wk]:
            return
        problems.append(f"{where}: type changed from {wk} to {rk}")
        return
    if rk in PRIMITIVES:
        return
    if rk in ("record", "enum", "fixed"):
        rname, wname = reader["name"].rpartition(".")[2], writer["name"].rpartition(".")[2]
        if rname != wname and wname not in [a.rpartition(".")[2] for a in reader.get("aliases", [])]:
            problems.append(f"{where}: named type {wname} became {rname}")
            return
    if rk == "record":
        key = (id(reader), id(writer))
        if key in seen:
            return
        seen.add(key)
        writer_fields = {f["name"]: f for f in writer.get("fields", [])}
        for field in reader.get("fields", []):
            names = [field["name"], *field.get("aliases", [])]
            match = next((writer_fields[n] for n in names if n in writer_fields), None)
            if match is None:
                if "default" not in field:
                    problems.append(f"{path}/{field['name']}: field added without a default")
                continue
            _check(field["type"], match["type"], rp, wp, f"{path}/{field['name']}", problems, seen)
    elif rk == "enum":
        missing = [s for s in writer.get("symbols", []) if s not in reader.get("symbols", [])]
        if missing and "default" not in reader:
            problems.append(f"{where}: enum symbols {missing} removed and the reader has no default")
    elif rk == "array":
        _check(reader["items"], writer["items"], rp, wp, f"{path}[]", problems, seen)
    elif rk == "map":
        _check(reader["values"], writer["values"], rp, wp, f"{path}{{}}", problems, seen)
    elif rk == "fixed" and reader.get("size") != writer.get("size"):
        problems.append(f"{where}: fixed size changed from {writer.get('size')} to {reader.get('size')}")


def _readable(reader, writer, rp, wp, path, seen) -> bool:
    problems: list[str] = []
    _check(reader, writer, rp, wp, path, problems, set(seen))
    return not problems


def _describe(node, parsed: Parsed) -> str:
    node = _resolve(node, parsed)
    kind = _kind(node)
    return f"{kind} {node['name']}" if isinstance(node, dict) and "name" in node else kind
