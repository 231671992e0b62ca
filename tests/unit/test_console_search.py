"""The message browser's JSON-path filter (gateway.operations.browse), on decoded values."""

from tideway_server.gateway.operations.browse import _header_matches, _json_matches


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
    from tideway_server.gateway.catalog import QueueInfo
    from tideway_server.gateway.schemas import SubjectSchemas, _compile, decode

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


PROTO = '''
syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
message Order {
  string id = 1;
  int64 amount = 2;
  repeated string tags = 3;
  map<string, int32> counts = 4;
  Customer customer = 5;
  Status status = 6;
  optional string note = 7;
  oneof pay { string card = 8; string iban = 9; }
  google.protobuf.Timestamp at = 10;
  message Line { string sku = 1; }
  repeated Line lines = 11;
}
message Customer { int32 id = 1; }
enum Status { NEW = 0; PAID = 1; }
'''


def test_protobuf_values_are_decoded_with_the_message_type_their_indexes_name():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, timestamp_pb2
    from tideway_server.gateway.catalog import QueueInfo
    from tideway_server.gateway.schemas import SubjectSchemas, _compile, decode
    from tideway_server.registry.protobuf_reader import read_message_indexes

    compiled = _compile("PROTOBUF", PROTO)
    assert compiled.reader is not None
    # A writer's classes, built independently of the reader from the same descriptor (as protoc would give them).
    pool = descriptor_pool.DescriptorPool()
    well_known = descriptor_pb2.FileDescriptorProto()
    timestamp_pb2.DESCRIPTOR.CopyToProto(well_known)
    pool.Add(well_known)
    file = pool.Add(compiled.reader.file)
    order_class = message_factory.GetMessageClass(file.message_types_by_name["Order"])
    order = order_class(id="o-1", amount=5, tags=["a", "b"], status=1, note="hi", card="4242")
    order.counts["x"] = 3
    order.customer.id = 42
    order.at.seconds = 1_700_000_000
    order.lines.add(sku="s1")
    subject = SubjectSchemas("orders-value", by_id={9: compiled}, latest=compiled)
    queue = QueueInfo(id=1, tenant_id=1, name="orders", mode="queue", broker_topic="t1.orders", dead_letter_topic="t1.orders.dlq",
                      partitions=1, bootstrap="", max_message_bytes=1 << 20, visibility_timeout_ms=30_000,
                      schema_subject="orders-value", schema_encoding="confluent")
    head = b"\x00" + (9).to_bytes(4, "big")
    decoded, how = decode(queue, subject, head + b"\x00" + order.SerializeToString())  # 0: the first message
    assert how == "Protobuf shop.Order, schema id 9"
    assert decoded == {"id": "o-1", "amount": "5", "tags": ["a", "b"], "counts": {"x": 3}, "customer": {"id": 42},
                       "status": "PAID", "note": "hi", "card": "4242", "at": "2023-11-14T22:13:20Z", "lines": [{"sku": "s1"}]}
    customer_class = message_factory.GetMessageClass(file.message_types_by_name["Customer"])
    # Indexes [1] (zigzag: count 2, index 2): the second top-level message.
    assert decode(queue, subject, head + bytes([2, 2]) + customer_class(id=7).SerializeToString()) == \
        ({"id": 7}, "Protobuf shop.Customer, schema id 9")
    assert read_message_indexes(bytes([4, 0, 2, 0xFF])) == ([0, 1], 3)  # Order's second nested type (after CountsEntry)
    assert decode(queue, subject, head + b"\x00\xff\xff") is None  # not a valid Order: shown as bytes


def test_a_protobuf_schema_the_reader_cannot_load_still_checks_ids():
    from tideway_server.gateway.schemas import _compile

    compiled = _compile("PROTOBUF", 'syntax = "proto3"; import "other.proto"; message A { other.B b = 1; }')
    assert compiled.schema_type == "PROTOBUF" and compiled.reader is None


def test_a_header_filter_matches_a_name_or_a_name_and_value():
    headers = [("source", b"web"), ("trace", None), ("source", b"batch")]
    assert _header_matches(headers, "source") and _header_matches(headers, "trace")
    assert _header_matches(headers, "source=batch") and _header_matches(headers, " source = web ")
    assert not _header_matches(headers, "source=app") and not _header_matches(headers, "missing")
    assert _header_matches(headers, "trace=") and not _header_matches([], "source")
