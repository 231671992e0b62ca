"""Protobuf: parsing .proto text (proto-schema-parser), and wire compatibility.

Protobuf readers skip unknown fields and default missing ones, so most
changes are compatible. What breaks readers (as in Confluent's checks): a
changed package; a message the writer uses that the reader lacks; a field
number whose type changes to one with another wire encoding (the groups
int32/int64/uint32/uint64/bool, sint32/sint64, fixed32/sfixed32,
fixed64/sfixed64 and string/bytes are interchangeable); a field changing
between singular, repeated and map; a proto2 required field the writer
does not send.
"""

from __future__ import annotations

from antlr4.error.ErrorListener import ErrorListener
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser
from tideway_server.registry.compatibility.errors import InvalidSchema

WIRE_GROUPS = [{"int32", "int64", "uint32", "uint64", "bool"}, {"sint32", "sint64"}, {"fixed32", "sfixed32"},
               {"fixed64", "sfixed64"}, {"string", "bytes"}, {"float"}, {"double"}]


class _Raise(ErrorListener):
    def syntaxError(self, recognizer, offendingSymbol, line, column, msg, e):  # noqa: N802 - antlr's name
        raise InvalidSchema(f"invalid Protobuf schema: line {line}:{column} {msg}")


def _strict(component) -> None:
    component.removeErrorListeners()
    component.addErrorListener(_Raise())


class Parsed:
    def __init__(self, package: str, messages: dict[str, dict[int, tuple[str, str]]]) -> None:
        self.package = package
        self.messages = messages  # full message name -> field number -> (type, kind)


def parse(text: str) -> Parsed:
    if not isinstance(text, str) or not text.strip():
        raise InvalidSchema("invalid Protobuf schema: empty")
    tree = Parser(setup_lexer=_strict, setup_parser=_strict).parse(text)
    package = next((e.name for e in tree.file_elements if isinstance(e, ast.Package)), "")
    messages: dict[str, dict[int, tuple[str, str]]] = {}
    for element in tree.file_elements:
        if isinstance(element, ast.Message):
            _collect(element, "", messages)
    if not messages and not any(isinstance(e, ast.Enum) for e in tree.file_elements):
        raise InvalidSchema("invalid Protobuf schema: no message or enum")
    return Parsed(package, messages)


def _collect(message: ast.Message, prefix: str, out: dict) -> None:
    name = f"{prefix}{message.name}"
    fields: dict[int, tuple[str, str]] = {}
    for element in message.elements:
        if isinstance(element, ast.Message):
            _collect(element, f"{name}.", out)
        elif isinstance(element, ast.Field):
            fields[element.number] = (element.type, _cardinality(element))
        elif isinstance(element, ast.MapField):
            fields[element.number] = (f"map<{element.key_type},{element.value_type}>", "map")
        elif isinstance(element, ast.OneOf):
            for field in element.elements:
                if isinstance(field, ast.Field):
                    fields[field.number] = (field.type, "singular")
    out[name] = fields


def _cardinality(field: ast.Field) -> str:
    value = getattr(field.cardinality, "value", None)
    return {"REPEATED": "repeated", "REQUIRED": "required"}.get(value, "singular")


def _same_wire(a: str, b: str) -> bool:
    return a == b or any(a in group and b in group for group in WIRE_GROUPS)


def reader_errors(reader: Parsed, writer: Parsed) -> list[str]:
    problems = []
    if reader.package != writer.package:
        problems.append(f"package changed from {writer.package!r} to {reader.package!r}")
    for name, writer_fields in writer.messages.items():
        reader_fields = reader.messages.get(name)
        if reader_fields is None:
            problems.append(f"message {name} removed")
            continue
        for number, (rtype, rkind) in reader_fields.items():
            if number not in writer_fields:
                if rkind == "required":
                    problems.append(f"{name} field {number}: required field added")
                continue
            wtype, wkind = writer_fields[number]
            if {rkind, wkind} - {"singular", "required"} and rkind != wkind:
                problems.append(f"{name} field {number}: changed from {wkind} to {rkind}")
            elif not _same_wire(rtype, wtype):
                problems.append(f"{name} field {number}: type changed from {wtype} to {rtype}")
    return problems
