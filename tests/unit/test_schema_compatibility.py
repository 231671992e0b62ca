"""Compatibility rules of the schema registry, per schema type and level (no server needed)."""

from __future__ import annotations

import json

import pytest
from tideway_server.registry.compatibility import InvalidSchema, check, parse


def avro(*fields) -> str:
    return json.dumps({"type": "record", "name": "R", "fields": list(fields)})


def problems(schema_type: str, level: str, new: str, *previous: str) -> list[str]:
    return check(schema_type, level, parse(schema_type, new), [parse(schema_type, p) for p in previous])


def compatible(schema_type: str, level: str, new: str, *previous: str) -> bool:
    return not problems(schema_type, level, new, *previous)


ID = {"name": "id", "type": "long"}


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [
        (avro(ID), avro(ID, {"name": "n", "type": "string", "default": ""}), True, True),
        (avro(ID), avro(ID, {"name": "n", "type": "string"}), False, True),
        (avro(ID, {"name": "n", "type": "string"}), avro(ID), True, False),
        (avro({"name": "id", "type": "int"}), avro(ID), True, False),  # int promotes to long, not back
        (avro(ID), avro({"name": "id", "type": "string"}), False, False),
        (avro(ID, {"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A", "B"]}}),
         avro(ID, {"name": "c", "type": {"type": "enum", "name": "C", "symbols": ["A"]}}), False, True),
        (avro(ID, {"name": "o", "type": ["null", "string"], "default": None}),
         avro(ID, {"name": "o", "type": ["null", "string", "long"], "default": None}), True, False),
        (avro(ID), avro({"name": "key", "aliases": ["id"], "type": "long"}), True, False),
    ],
)
def test_avro_resolution_rules(old, new, backward, forward):
    assert compatible("AVRO", "BACKWARD", new, old) is backward
    assert compatible("AVRO", "FORWARD", new, old) is forward
    assert compatible("AVRO", "FULL", new, old) is (backward and forward)
    assert problems("AVRO", "NONE", new, old) == []


def test_avro_recursive_records_terminate():
    node = {"type": "record", "name": "Node", "fields": [{"name": "next", "type": ["null", "Node"], "default": None}]}
    assert problems("AVRO", "FULL", json.dumps(node), json.dumps(node)) == []


def js(**schema) -> str:
    return json.dumps(schema)


CLOSED = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"], "additionalProperties": False}


@pytest.mark.parametrize(
    ("old", "new", "backward", "forward"),
    [
        (js(**CLOSED), js(**{**CLOSED, "properties": {"id": {"type": "integer"}, "x": {"type": "string"}}}), True, False),
        (js(**CLOSED), js(**{**CLOSED, "properties": {"id": {"type": "number"}}}), True, False),  # widened
        (js(**CLOSED), js(**{**CLOSED, "properties": {"id": {"type": "integer"}, "x": {"type": "string"}},
                             "required": ["id", "x"]}), False, False),
        (js(type="string", enum=["a", "b"]), js(type="string", enum=["a", "b", "c"]), True, False),
        (js(type="string", maxLength=10), js(type="string", maxLength=5), False, True),
        (js(type="array", items={"type": "integer"}), js(type="array", items={"type": "string"}), False, False),
        # Open content model: adding a typed property could reject what an old writer sent under that name.
        (js(type="object", properties={"id": {"type": "integer"}}),
         js(type="object", properties={"id": {"type": "integer"}, "x": {"type": "string"}}), False, True),
    ],
)
def test_json_schema_rules(old, new, backward, forward):
    assert compatible("JSON", "BACKWARD", new, old) is backward
    assert compatible("JSON", "FORWARD", new, old) is forward


PROTO_V1 = 'syntax = "proto3"; package shop; message Order { int64 id = 1; string note = 2; }'


@pytest.mark.parametrize(
    ("new", "expected"),
    [
        ('syntax = "proto3"; package shop; message Order { int64 id = 1; string note = 2; int32 qty = 3; }', True),
        ('syntax = "proto3"; package shop; message Order { int64 id = 1; }', True),  # removed fields are skipped
        ('syntax = "proto3"; package shop; message Order { uint64 id = 1; bytes note = 2; }', True),  # same wire types
        ('syntax = "proto3"; package shop; message Order { string id = 1; string note = 2; }', False),
        ('syntax = "proto3"; package shop; message Order { repeated int64 id = 1; string note = 2; }', False),
        ('syntax = "proto3"; package other; message Order { int64 id = 1; string note = 2; }', False),
        ('syntax = "proto3"; package shop; message Invoice { int64 id = 1; }', False),
    ],
)
def test_protobuf_rules(new, expected):
    assert compatible("PROTOBUF", "FULL", new, PROTO_V1) is expected


def test_transitive_levels_compare_with_every_version():
    v1 = avro(ID, {"name": "a", "type": "double"})
    v2 = avro(ID, {"name": "a", "type": "double", "default": 0.0})
    v3 = avro(ID)
    assert problems("AVRO", "FORWARD", v3, v1, v2) == []
    assert problems("AVRO", "FORWARD_TRANSITIVE", v3, v1, v2) != []


@pytest.mark.parametrize(
    ("schema_type", "text"),
    [
        ("AVRO", '{"type": "record", "name": "X"}'),
        ("AVRO", '{"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}'),
        ("AVRO", "{not json"),
        ("JSON", '{"type": 12}'),
        ("JSON", "[1, 2]"),
        ("PROTOBUF", "message { broken"),
        ("PROTOBUF", ""),
    ],
)
def test_invalid_schemas_are_refused(schema_type, text):
    with pytest.raises(InvalidSchema):
        parse(schema_type, text)
