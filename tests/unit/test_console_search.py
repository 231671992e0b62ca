"""The message browser's JSON-path filter (webui.browse), on decoded values."""

from webui.browse import _json_matches


def test_a_path_matches_when_the_field_exists_or_equals_the_value():
    order = {"id": 42, "customer": {"name": "Ada", "tags": ["vip", "eu"]}, "paid": True, "note": None}
    assert _json_matches(order, "customer.name")
    assert _json_matches(order, "$.customer.name = Ada")
    assert _json_matches(order, "id=42") and not _json_matches(order, "id=43")
    assert _json_matches(order, 'customer.name="Ada"')
    assert _json_matches(order, "customer.tags.0=vip") and not _json_matches(order, "customer.tags.5")
    assert _json_matches(order, "paid=true") and _json_matches(order, "note=null")
    assert not _json_matches(order, "customer.email") and not _json_matches([1, 2], "a")


def test_values_in_confluents_wire_format_are_decoded_with_the_subjects_schema():
    import io
    import json

    import fastavro

    from gateway.catalog import QueueInfo
    from gateway.schemas import SubjectSchemas, _compile, decode

    schema_text = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})
    compiled = _compile("AVRO", schema_text)
    subject = SubjectSchemas("orders-value", by_id={7: compiled}, latest=compiled)
    queue = QueueInfo(id=1, tenant_id=1, name="orders", mode="queue", broker_topic="t1.orders", dead_letter_topic="t1.orders.dlq",
                      partitions=1, bootstrap="", max_message_bytes=1 << 20, visibility_timeout_ms=30_000,
                      schema_subject="orders-value", schema_encoding="confluent")
    payload = io.BytesIO()
    fastavro.schemaless_writer(payload, compiled.check, {"id": 42})
    assert decode(queue, subject, b"\x00" + (7).to_bytes(4, "big") + payload.getvalue()) == ({"id": 42}, "Avro, schema id 7")
    assert decode(queue, subject, b"\x00" + (8).to_bytes(4, "big") + payload.getvalue()) is None  # not a version of it
    assert decode(queue, None, b'{"id": 1}') == ({"id": 1}, "JSON")
    assert decode(queue, None, b"\xff\x00") is None
