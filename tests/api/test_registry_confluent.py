"""Confluent's own Schema Registry client (confluent-kafka on PyPI) against Tideway's registry."""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient, ServerConfig
from confluent_kafka.schema_registry.common.schema_registry_client import ConfigCompatibilityLevel
from confluent_kafka.schema_registry.error import SchemaRegistryError

ORDER_V1 = {"type": "record", "name": "Order", "namespace": "shop",
            "fields": [{"name": "id", "type": "long"}, {"name": "amount", "type": "double"}]}
# Adds a field with a default: readable both ways.
ORDER_V2 = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "currency", "type": "string", "default": "EUR"}]}
# Adds a field without a default: a new reader cannot read old data (not backward).
ORDER_NO_DEFAULT = {**ORDER_V1, "fields": [*ORDER_V1["fields"], {"name": "coupon", "type": "string"}]}
# Drops a field that has no default: an old reader cannot read new data (not forward).
ORDER_DROPPED = {**ORDER_V1, "fields": ORDER_V1["fields"][:1]}

JSON_V1 = {"type": "object", "properties": {"id": {"type": "integer"}, "note": {"type": "string"}},
           "required": ["id"], "additionalProperties": False}
JSON_V2 = {**JSON_V1, "properties": {**JSON_V1["properties"], "tag": {"type": "string"}}}  # optional field, closed model
JSON_REQUIRED = {**JSON_V2, "required": ["id", "tag"]}  # a new required field: not backward
JSON_NARROWED = {**JSON_V1, "properties": {**JSON_V1["properties"], "id": {"type": "string"}}}  # type change: neither


@pytest.fixture
def registry(control_plane):
    _, key = control_plane.create_tenant()
    return SchemaRegistryClient({"url": f"{control_plane.base_url}/api/v1/registry", "basic.auth.user.info": f"key:{key}"})


def _avro(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "AVRO")


def _json(schema: dict) -> Schema:
    return Schema(json.dumps(schema), "JSON")


def test_register_fetch_and_check_avro(registry):
    subject = "orders-value"
    first_id = registry.register_schema(subject, _avro(ORDER_V1))
    assert registry.get_schema(first_id).schema_str == json.dumps(ORDER_V1)
    # The same text under another subject keeps its id (the client caches per subject, so this asks the server).
    assert registry.register_schema("orders-copy-value", _avro(ORDER_V1)) == first_id
    assert registry.test_compatibility(subject, _avro(ORDER_V2)) is True
    assert registry.test_compatibility(subject, _avro(ORDER_NO_DEFAULT)) is False
    second_id = registry.register_schema(subject, _avro(ORDER_V2))
    latest = registry.get_latest_version(subject)
    assert latest.version == 2 and latest.schema_id == second_id != first_id
    assert registry.get_version(subject, 1).schema.schema_str == json.dumps(ORDER_V1)
    assert registry.get_versions(subject) == [1, 2]
    assert subject in registry.get_subjects()
    assert registry.lookup_schema(subject, _avro(ORDER_V1)).version == 1
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, _avro(ORDER_NO_DEFAULT))
    assert refused.value.http_status_code == 409
    assert registry.get_versions(subject) == [1, 2]  # nothing registered


def test_register_fetch_and_check_json_schema(registry):
    subject = "events-value"
    registry.register_schema(subject, _json(JSON_V1))
    assert registry.test_compatibility(subject, _json(JSON_V2)) is True
    registry.register_schema(subject, _json(JSON_V2))
    assert registry.get_latest_version(subject).schema.schema_type == "JSON"
    assert registry.test_compatibility(subject, _json(JSON_REQUIRED)) is False
    with pytest.raises(SchemaRegistryError) as refused:
        registry.register_schema(subject, _json(JSON_NARROWED))
    assert refused.value.http_status_code == 409


@pytest.mark.parametrize(
    ("level", "refused", "accepted"),
    [
        ("BACKWARD", ORDER_NO_DEFAULT, ORDER_DROPPED),
        ("FORWARD", ORDER_DROPPED, ORDER_NO_DEFAULT),
        ("FULL", ORDER_NO_DEFAULT, ORDER_V2),
        ("FULL", ORDER_DROPPED, ORDER_V2),
        ("NONE", None, ORDER_DROPPED),
    ],
)
def test_each_level_refuses_what_it_must(registry, level, refused, accepted):
    subject = f"levels-{level.lower()}-value"
    registry.register_schema(subject, _avro(ORDER_V1))
    registry.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel(level)))
    assert registry.get_config(subject).compatibility_level.value == level
    if refused is not None:
        with pytest.raises(SchemaRegistryError) as error:
            registry.register_schema(subject, _avro(refused))
        assert error.value.http_status_code == 409 and error.value.error_code == 409
    registry.register_schema(subject, _avro(accepted))
    assert registry.get_versions(subject) == [1, 2]


@pytest.mark.parametrize(
    ("level", "third_accepted"),
    [("BACKWARD", True), ("BACKWARD_TRANSITIVE", False), ("FORWARD", True), ("FORWARD_TRANSITIVE", False),
     ("FULL", True), ("FULL_TRANSITIVE", False)],
)
def test_transitive_levels_check_every_version(registry, level, third_accepted):
    """A third version compatible with the second but not with the first passes only the non-transitive level."""
    base = [{"name": "id", "type": "long"}]
    if level.startswith("BACKWARD"):
        # v1 has no note; v2 adds it with a default; v3 needs it (no default): v3 cannot read v1 data.
        versions = [base, [*base, {"name": "note", "type": "string", "default": ""}], [*base, {"name": "note", "type": "string"}]]
    elif level.startswith("FORWARD"):
        # v1 needs amount; v2 defaults it; v3 drops it: v1 cannot read v3 data.
        versions = [[*base, {"name": "amount", "type": "double"}], [*base, {"name": "amount", "type": "double", "default": 0.0}], base]
    else:
        # v1 needs amount; v2 defaults it; v3 drops it and adds a defaulted note: v1 cannot read v3 data.
        versions = [[*base, {"name": "amount", "type": "double"}], [*base, {"name": "amount", "type": "double", "default": 0.0}],
                    [*base, {"name": "note", "type": "string", "default": ""}]]
    subject = f"transitive-{level.lower()}"
    registry.set_config(subject, ServerConfig(compatibility=ConfigCompatibilityLevel(level)))
    for fields in versions[:2]:
        registry.register_schema(subject, _avro({"type": "record", "name": "R", "fields": fields}))
    third = _avro({"type": "record", "name": "R", "fields": versions[2]})
    if third_accepted:
        registry.register_schema(subject, third)
        assert registry.get_versions(subject) == [1, 2, 3]
    else:
        with pytest.raises(SchemaRegistryError) as refused:
            registry.register_schema(subject, third)
        assert refused.value.http_status_code == 409
        assert registry.get_versions(subject) == [1, 2]


def test_bad_schemas_and_unknown_things_get_confluent_errors(registry):
    with pytest.raises(SchemaRegistryError) as invalid:
        registry.register_schema("bad-value", Schema('{"type": "record", "name": "X"}', "AVRO"))
    assert invalid.value.http_status_code == 422 and invalid.value.error_code == 42201
    with pytest.raises(SchemaRegistryError) as missing:
        registry.get_latest_version("never-registered")
    assert missing.value.error_code == 40401
    with pytest.raises(SchemaRegistryError) as no_id:
        registry.get_schema(987654321)
    assert no_id.value.error_code == 40403
    assert registry.get_subjects() == []
