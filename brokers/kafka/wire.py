"""Kafka's wire protocol around the message bodies: request headers, response headers, the versions served.

Pure codecs, no sockets. A Kafka frame is framed exactly as a native one (``tideway/protocol/frames.py``)::

    request  := length:int32  api_key:int16  api_version:int16  correlation_id:int32  client_id  [tagged fields]  body
    response := length:int32  correlation_id:int32  [tagged fields]  body

so the broker's connection code (limits, buffers, pipelining) serves both listeners. ``client_id`` is a
nullable int16-length string; the tagged fields (a uvarint count, then tag, size and bytes each) follow only in
request header v2 and response header v1, the headers of *flexible* versions (KIP-482). ApiVersions answers
with response header v0 at every version, so a client that does not yet know the broker's versions can read it.

The bodies are Kafka's own message definitions, as the ``kio`` package generates them from Kafka's JSON message
schemas (``clients/src/main/resources/common/message``): one dataclass per API, version and direction. Produce
and Fetch carry RecordBatches as bytes; nothing here looks inside them.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import struct
import types
import uuid
from functools import cache

from kio.index import UnknownAPIKey, UnknownEntity, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import BufferUnderflow
from kio.serial.readers import read_unsigned_varint

__all__ = ["API_NAMES", "SUPPORTED", "HeaderError", "RequestHeader", "decode_request", "encode_response",
           "parse_header", "supported", "unsupported_version_answer"]

# What this listener implements, (lowest, highest) per API key; ApiVersions advertises exactly this. Produce
# is advertised from 0, as Kafka 4 does, because librdkafka turns compression off for a broker whose lowest
# Produce version is above 2; versions 0-2 (message formats before RecordBatch v2) are refused.
SUPPORTED: dict[int, tuple[int, int]] = {
    0: (0, 9),  # Produce: v3+ served (RecordBatch v2); v10+ would add only tagged leader hints
    1: (4, 12),  # Fetch: v13 names topics by id, which Tideway has not
    2: (1, 6),  # ListOffsets: v7 adds the max-timestamp query
    3: (0, 12),  # Metadata
    8: (2, 7),  # OffsetCommit: v8+ are flexible; every client here sends 7 or lower
    9: (1, 7),  # OffsetFetch: v8 asks for several groups at once
    10: (0, 3),  # FindCoordinator: v4 asks for several keys at once
    11: (0, 5),  # JoinGroup (classic protocol): v6+ flexible, v8 reasons, v9 skip_assignment
    12: (0, 3),  # Heartbeat
    13: (0, 2),  # LeaveGroup: v3 leaves several members at once
    14: (0, 3),  # SyncGroup
    15: (0, 5),  # DescribeGroups: v6 adds error messages
    16: (0, 5),  # ListGroups
    # SaslHandshake: v0 is advertised because librdkafka before 2.x needs it in the table to use SASL at all (it then
    # sends v1); a client that authenticates with v0 sends raw SASL tokens outside Kafka's framing next, which this
    # listener does not read (the connection closes): every client here moves to v1 with SaslAuthenticate.
    17: (0, 1),
    18: (0, 4),  # ApiVersions
    19: (2, 7),  # CreateTopics (versions before 2 are gone from Kafka 4)
    20: (1, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 4),  # InitProducerId: idempotent and transactional producers
    24: (0, 3),  # AddPartitionsToTxn: v4 batches transactions for brokers' verification (KIP-890)
    25: (0, 3),  # AddOffsetsToTxn
    26: (0, 3),  # EndTxn
    28: (0, 3),  # TxnOffsetCommit
    23: (2, 4),  # OffsetForLeaderEpoch
    32: (1, 4),  # DescribeConfigs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    42: (0, 2),  # DeleteGroups
    47: (0, 0),  # OffsetDelete
    60: (0, 1),  # DescribeCluster: v2 adds fenced brokers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions: v2 filters by transactional id pattern
}
PRODUCE_SERVED_MIN = 3

API_NAMES = {0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit", 9: "OffsetFetch",
             10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup",
             15: "DescribeGroups", 16: "ListGroups", 17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics",
             20: "DeleteTopics", 21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
             24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 28: "TxnOffsetCommit",
             32: "DescribeConfigs", 36: "SaslAuthenticate", 37: "CreatePartitions", 42: "DeleteGroups",
             47: "OffsetDelete", 60: "DescribeCluster", 65: "DescribeTransactions", 66: "ListTransactions"}

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")


class HeaderError(ValueError):
    """Raised when a request header cannot be read (the connection cannot trust the stream after it)."""


class RequestHeader:
    __slots__ = ("api_key", "api_version", "body_offset", "client_id", "correlation_id")

    def __init__(self, api_key: int, api_version: int, correlation_id: int, client_id: str | None, body_offset: int):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id
        self.body_offset = body_offset  # where the body starts in the frame


def supported(api_key: int, api_version: int) -> bool:
    span = SUPPORTED.get(api_key)
    if span is None or not span[0] <= api_version <= span[1]:
        return False
    return api_key != 0 or api_version >= PRODUCE_SERVED_MIN


@cache
def _flexible(api_key: int, api_version: int) -> bool:
    return bool(load_request_schema(api_key, api_version).__flexible__)


def parse_header(api_key: int, api_version: int, correlation_id: int, rest: bytes | memoryview) -> RequestHeader:
    """The rest of a request's header (``rest``: the frame after its api key, version and correlation id, which
    the connection has read) for a supported API and version; ``body_offset`` counts from the start of ``rest``."""
    if len(rest) < 2:
        raise HeaderError("a request shorter than its header")
    (client_id_length,) = _INT16.unpack_from(rest, 0)
    position = 2
    client_id = None
    if client_id_length >= 0:
        end = position + client_id_length
        if end > len(rest):
            raise HeaderError("the client id runs past the request")
        client_id = bytes(rest[position:end]).decode("utf-8", "replace")
        position = end
    elif client_id_length != -1:
        raise HeaderError(f"client id length {client_id_length}")
    if _flexible(api_key, api_version):
        count, position = _uvarint(rest, position)
        for _ in range(count):
            _tag, position = _uvarint(rest, position)
            size, position = _uvarint(rest, position)
            position += size
            if position > len(rest):
                raise HeaderError("a tagged header field runs past the request")
    return RequestHeader(api_key, api_version, correlation_id, client_id, position)


def _uvarint(data: bytes | memoryview, position: int) -> tuple[int, int]:
    """An unsigned varint (kio's reader) and the position after it."""
    try:
        value, size = read_unsigned_varint(data, position)
    except (BufferUnderflow, ValueError) as exc:
        raise HeaderError(f"a malformed varint in the request header: {exc}") from None
    return value, position + size


@cache
def _reader(api_key: int, api_version: int):
    return entity_reader(load_request_schema(api_key, api_version))


@cache
def response_type(api_key: int, api_version: int):
    return load_response_schema(api_key, api_version)


def decode_request(header: RequestHeader, rest: bytes | memoryview):
    """The request's body as kio's dataclass for its API and version; ValueError (or kio's errors) when the
    bytes do not hold one. Bytes after the body are ignored, as Kafka's brokers ignore them (librdkafka 2.16
    sends three after a Metadata v12 request's)."""
    body, _size = _reader(header.api_key, header.api_version)(rest[header.body_offset:], 0)
    return body


def encode_response(response) -> bytes:
    """What follows the correlation id in the response frame: the header's tagged fields (header v1), then the
    body."""
    out = io.BytesIO()
    if response.__header_schema__.__flexible__:
        out.write(b"\x00")  # no tagged fields
    entity_writer(type(response))(out, response)
    return out.getvalue()


def api_versions_error(api_versions_version: int) -> bytes:
    """KIP-511: an ApiVersions request of a version this broker does not serve is answered in v0's shape, with
    UNSUPPORTED_VERSION and the versions it does serve, so the client can retry with one of them."""
    entries = b"".join(struct.pack(">hhh", key, low, high) for key, (low, high) in sorted(SUPPORTED.items()))
    return _INT16.pack(ErrorCode.unsupported_version) + _INT32.pack(len(SUPPORTED)) + entries


# Values of an answer that carries nothing but its error, by Kafka type (ids and offsets -1, as Kafka's are).
_NOTHING = {"bool": False, "bytes": b"", "int8": -1, "int16": -1, "int32": -1, "int64": -1, "float64": 0.0,
            "string": "", "records": None, "uuid": uuid.UUID(int=0), "timedelta_i32": datetime.timedelta(0),
            "timedelta_i64": datetime.timedelta(0), "datetime_i64": datetime.datetime.fromtimestamp(0, datetime.UTC),
            "error_code": ErrorCode.unsupported_version}


def _nothing(cls):
    """An instance of kio's dataclass ``cls`` holding nothing: every error field UNSUPPORTED_VERSION, lists empty."""
    values = {}
    for field in dataclasses.fields(cls):
        if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING:
            continue
        kind = field.metadata.get("kafka_type")
        if type(field.type) is types.UnionType and type(None) in field.type.__args__:
            values[field.name] = None
        elif kind is not None:
            values[field.name] = _NOTHING[kind]
        elif dataclasses.is_dataclass(field.type):
            values[field.name] = _nothing(field.type)
        else:
            values[field.name] = ()  # a list of entities
    return cls(**values)


def unsupported_version_answer(api_key: int, api_version: int) -> bytes | None:
    """An answer to a request of an API this listener serves, in a version it does not, as that version's response
    with UNSUPPORTED_VERSION in its error field and nothing else (a client's error handling reads it, and the
    connection stays usable: the frame was whole); None when Kafka has no such version or the response carries
    its errors per item only (there is nothing to put UNSUPPORTED_VERSION in)."""
    try:
        response_type = load_response_schema(api_key, api_version)
    except (UnknownAPIKey, UnknownEntity):
        return None
    if "error_code" not in response_type.__dataclass_fields__:
        return None
    return encode_response(_nothing(response_type))
