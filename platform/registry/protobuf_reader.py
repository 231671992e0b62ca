"""Reading Protobuf messages written with a registered schema (the console's message browser shows them).

The registry keeps a schema as .proto text; protobuf's own runtime decodes
messages given a descriptor. This module turns the text (parsed by
proto-schema-parser, as the compatibility checks do) into a
FileDescriptorProto and loads it into a private DescriptorPool, which
resolves the type names as protoc would. Imports of Google's well-known types
(``google/protobuf/timestamp.proto`` ...) are supported; schema references to
other subjects are not (such messages are shown as bytes).

Confluent's wire format puts, between the schema id and the payload, the
path of the message type in the file: a count and that many indexes, all
zigzag varints (top-level message i, then its nested message j, ...), with
a single 0 byte for the first top-level message.
"""

from __future__ import annotations

import importlib

from google.protobuf import descriptor_pb2, descriptor_pool, json_format, message_factory
from proto_schema_parser import ast
from proto_schema_parser.parser import Parser

__all__ = ["ProtobufReader", "read_message_indexes"]

F = descriptor_pb2.FieldDescriptorProto
_SCALARS = {
    "double": F.TYPE_DOUBLE, "float": F.TYPE_FLOAT, "int64": F.TYPE_INT64, "uint64": F.TYPE_UINT64,
    "int32": F.TYPE_INT32, "fixed64": F.TYPE_FIXED64, "fixed32": F.TYPE_FIXED32, "bool": F.TYPE_BOOL,
    "string": F.TYPE_STRING, "bytes": F.TYPE_BYTES, "uint32": F.TYPE_UINT32, "sfixed32": F.TYPE_SFIXED32,
    "sfixed64": F.TYPE_SFIXED64, "sint32": F.TYPE_SINT32, "sint64": F.TYPE_SINT64,
}
_LABELS = {"REPEATED": F.LABEL_REPEATED, "REQUIRED": F.LABEL_REQUIRED}
MAX_INDEXES = 32  # nesting deeper than this is not a real schema's


def _varint(data: bytes, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise ValueError("truncated message indexes")
        byte = data[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7


def _zigzag(data: bytes, position: int) -> tuple[int, int]:
    value, position = _varint(data, position)
    return (value >> 1) ^ -(value & 1), position


def read_message_indexes(data: bytes) -> tuple[list[int], int]:
    """(the message type's path, where the payload starts) of a Confluent Protobuf payload (after the id)."""
    count, position = _zigzag(data, 0)
    if count == 0:
        return [0], position
    if not 0 < count <= MAX_INDEXES:
        raise ValueError(f"{count} message indexes")
    indexes = []
    for _ in range(count):
        index, position = _zigzag(data, position)
        indexes.append(index)
    return indexes, position


class ProtobufReader:
    """Decodes payloads of one .proto schema into plain data (protobuf's JSON mapping, field names as written)."""

    def __init__(self, text: str) -> None:
        tree = Parser().parse(text)
        self.file = _file_proto(tree)
        pool = descriptor_pool.DescriptorPool()
        for dependency in self.file.dependency:
            pool.Add(_well_known(dependency))
        self._descriptor = pool.Add(self.file)
        self._classes: dict[tuple[int, ...], type] = {}

    def _class(self, indexes: list[int]):
        key = tuple(indexes)
        found = self._classes.get(key)
        if found is None:
            descriptor = self._descriptor.message_types_by_name[self.file.message_type[indexes[0]].name]
            for index in indexes[1:]:
                descriptor = descriptor.nested_types[index]
            found = self._classes[key] = message_factory.GetMessageClass(descriptor)
        return found

    def decode(self, data: bytes) -> tuple[dict, str]:
        """(the message as data, its full type name) of ``data``: message indexes, then the payload."""
        indexes, start = read_message_indexes(data)
        message = self._class(indexes)()
        message.ParseFromString(data[start:])
        return json_format.MessageToDict(message, preserving_proto_field_name=True), message.DESCRIPTOR.full_name


def _well_known(name: str) -> descriptor_pb2.FileDescriptorProto:
    if not (name.startswith("google/protobuf/") and name.endswith(".proto")):
        raise ValueError(f"import {name!r}: only Google's well-known types can be imported here")
    module = importlib.import_module(name[:-len(".proto")].replace("/", ".") + "_pb2")
    proto = descriptor_pb2.FileDescriptorProto()
    module.DESCRIPTOR.CopyToProto(proto)
    return proto


def _file_proto(tree: ast.File) -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="schema.proto")
    syntax = tree.syntax or "proto2"
    if syntax not in ("proto2", "proto3"):
        raise ValueError(f"syntax {syntax!r} is not supported")
    proto.syntax = syntax
    for element in tree.file_elements:
        if isinstance(element, ast.Package):
            proto.package = element.name
        elif isinstance(element, ast.Import):
            proto.dependency.append(element.name)
        elif isinstance(element, ast.Message):
            proto.message_type.append(_message(element, syntax))
        elif isinstance(element, ast.Enum):
            proto.enum_type.append(_enum(element))
    return proto


def _enum(enum: ast.Enum) -> descriptor_pb2.EnumDescriptorProto:
    proto = descriptor_pb2.EnumDescriptorProto(name=enum.name)
    for value in enum.elements:
        if isinstance(value, ast.EnumValue):
            proto.value.add(name=value.name, number=value.number)
    return proto


def _message(message: ast.Message, syntax: str) -> descriptor_pb2.DescriptorProto:
    proto = descriptor_pb2.DescriptorProto(name=message.name)
    synthetic: list[tuple[descriptor_pb2.FieldDescriptorProto, str]] = []  # proto3 "optional": a oneof of its own
    for element in message.elements:
        if isinstance(element, ast.Field):
            field = _field(proto, element)
            if syntax == "proto3" and getattr(element.cardinality, "value", None) == "OPTIONAL":
                synthetic.append((field, element.name))
        elif isinstance(element, ast.MapField):
            entry = proto.nested_type.add(name="".join(part.capitalize() for part in element.name.split("_")) + "Entry")
            entry.options.map_entry = True
            _typed(entry.field.add(name="key", number=1, label=F.LABEL_OPTIONAL), element.key_type)
            _typed(entry.field.add(name="value", number=2, label=F.LABEL_OPTIONAL), element.value_type)
            proto.field.add(name=element.name, number=element.number, label=F.LABEL_REPEATED, type_name=entry.name)
        elif isinstance(element, ast.OneOf):
            proto.oneof_decl.add(name=element.name)
            for member in element.elements:
                if isinstance(member, ast.Field):
                    _field(proto, member).oneof_index = len(proto.oneof_decl) - 1
        elif isinstance(element, ast.Message):
            proto.nested_type.append(_message(element, syntax))
        elif isinstance(element, ast.Enum):
            proto.enum_type.append(_enum(element))
    for field, name in synthetic:  # after the real oneofs, as protoc orders them
        proto.oneof_decl.add(name=f"_{name}")
        field.oneof_index = len(proto.oneof_decl) - 1
        field.proto3_optional = True
    return proto


def _field(message: descriptor_pb2.DescriptorProto, element: ast.Field) -> descriptor_pb2.FieldDescriptorProto:
    label = _LABELS.get(getattr(element.cardinality, "value", None), F.LABEL_OPTIONAL)
    return _typed(message.field.add(name=element.name, number=element.number, label=label), element.type)


def _typed(field: descriptor_pb2.FieldDescriptorProto, type_name: str) -> descriptor_pb2.FieldDescriptorProto:
    scalar = _SCALARS.get(type_name)
    if scalar is not None:
        field.type = scalar
    else:
        field.type_name = type_name  # a message or an enum: the pool resolves it in the field's scope
    return field
