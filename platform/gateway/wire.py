"""JSON bodies of the data gateway: what clients send (decoded and checked by msgspec) and what they get.

Values and keys travel as UTF-8 text (``value``, ``key``) or, for binary
data, as base64 (``value_base64``, ``key_base64``). Answers carry ``value``
when the bytes are valid UTF-8 and ``value_base64`` otherwise (or always
base64 when the request asks ``encoding=base64``).
"""

from __future__ import annotations

import base64
import binascii
import time
from datetime import datetime
from typing import Annotated

import msgspec
from msgspec import Meta
from tideway_server.gateway.errors import GatewayError, invalid

from tideway.native.producer import record_size_estimate
from tideway.protocol.headers import DEADLINE_HEADER
from tideway.record.batch import BATCH_HEADER_BYTES

MAX_MESSAGES_PER_REQUEST = 1000
MAX_QUEUES_PER_ATOMIC_PUBLISH = 100
MAX_DEDUP_ID_LENGTH = 128
# deliver_at: from the epoch (a past time delivers at once) to this far ahead.
MAX_DELIVERY_DELAY_MS = 366 * 24 * 3600 * 1000

# Numbers a client sends are bounded where they are decoded, so a value too big
# for the protocol is a 400 naming the field, never a server error later on.
Offset = Annotated[int, Meta(ge=0, le=2**63 - 1)]
Partition = Annotated[int, Meta(ge=0, le=2**31 - 1)]
Timestamp = Annotated[int, Meta(ge=0, le=2**53)]  # ms since the epoch
Seconds = Annotated[float, Meta(ge=0, le=10**9)]
Count = Annotated[int, Meta(ge=0, le=2**31 - 1)]  # epochs, limits, sizes: what the protocol's int32 fields hold


class OutgoingMessage(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    value: str | None = None
    value_base64: str | None = None
    key: str | None = None
    key_base64: str | None = None
    headers: dict[str, str] = {}
    deliver_at: Timestamp | str | None = None  # ms since the epoch, or an ISO 8601 time
    dedup_id: str | None = None
    partition: Partition | None = None


class PublishBody(msgspec.Struct, forbid_unknown_fields=True):
    messages: list[OutgoingMessage]


class QueueMessages(msgspec.Struct, forbid_unknown_fields=True):
    queue: Annotated[str, Meta(pattern=r"^[A-Za-z0-9._-]{1,100}$")]
    messages: list[OutgoingMessage]


class AtomicPublishBody(msgspec.Struct, forbid_unknown_fields=True):
    """Messages for several queues of one tenant, published all together or not at all (a transaction)."""

    queues: Annotated[list[QueueMessages], Meta(min_length=1, max_length=MAX_QUEUES_PER_ATOMIC_PUBLISH)]


class ReceiveBody(msgspec.Struct, forbid_unknown_fields=True):
    max_messages: Count = 10
    wait_seconds: Seconds = 0
    visibility_timeout: Seconds | None = None  # seconds


class ReceiptsBody(msgspec.Struct, forbid_unknown_fields=True):
    receipts: list[str]
    delay_seconds: Seconds | None = None  # nack: redeliver after this long (default: the queue's backoff)
    seconds: Seconds | None = None  # extend: hold the locks this much longer from now
    error: Annotated[str, Meta(max_length=1000)] = ""  # nack and reject: why, kept in the dead-letter headers


class CommitOffset(msgspec.Struct, forbid_unknown_fields=True):
    partition: Partition
    offset: Offset


class CommitBody(msgspec.Struct, forbid_unknown_fields=True):
    offsets: list[CommitOffset]
    member_id: Annotated[str, Meta(max_length=100)] = ""
    member_epoch: Annotated[int, Meta(ge=-1, le=2**31 - 1)] = -1


class SeekBody(msgspec.Struct, forbid_unknown_fields=True):
    to: str | None = None  # "earliest" or "latest"
    offset: Offset | None = None
    timestamp: Timestamp | None = None  # ms since the epoch
    partitions: list[Partition] | None = None


class HeartbeatBody(msgspec.Struct, forbid_unknown_fields=True):
    member_epoch: Count = 0
    owned: list[Partition] | None = None
    session_timeout_ms: Count = 30_000


class SelectedLetter(msgspec.Struct, forbid_unknown_fields=True):
    partition: Partition
    offset: Offset


class RedriveBody(msgspec.Struct, forbid_unknown_fields=True):
    rate_per_s: float = 100.0
    limit: Count | None = None
    messages: list[SelectedLetter] | None = None  # only these dead letters (partition and offset, as listed)


class TokenBody(msgspec.Struct, forbid_unknown_fields=True):
    ttl_seconds: Count = 300
    scopes: list[str] | None = None
    queues: list[str] | None = None


_decoders: dict[type, msgspec.json.Decoder] = {}


def decode(body: bytes, kind: type):
    """Decode a JSON body into ``kind`` or raise 400 with msgspec's reason (path included)."""
    decoder = _decoders.get(kind)
    if decoder is None:
        decoder = _decoders[kind] = msgspec.json.Decoder(kind)
    if not body.strip():
        body = b"{}"
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise invalid(f"the body is not valid: {exc}") from None
    except msgspec.DecodeError as exc:
        raise GatewayError("malformed_request", f"the body is not JSON: {exc}") from None
    except UnicodeDecodeError as exc:
        raise GatewayError("malformed_request", f"the body is not UTF-8 JSON: byte {exc.start} is not UTF-8") from None


def _bytes_of(text: str | None, b64: str | None, what: str, index: int) -> bytes | None:
    if text is not None and b64 is not None:
        raise invalid(f"message {index}: give {what} or {what}_base64, not both", index=index)
    if text is not None:
        return text.encode()
    if b64 is not None:
        try:
            return base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise invalid(f"message {index}: {what}_base64 is not valid base64", index=index) from None
    return None


def deadline_ms(deliver_at: int | str, index: int) -> int:
    """deliver_at in ms since the epoch: 1970 (or any past time: at once) up to a year ahead."""
    if isinstance(deliver_at, int):
        moment_ms = deliver_at
    else:
        try:
            moment = datetime.fromisoformat(deliver_at.replace("Z", "+00:00"))
        except ValueError:
            raise invalid(f"message {index}: deliver_at {deliver_at!r} is neither ms since the epoch nor an ISO 8601 time",
                          index=index) from None
        if moment.tzinfo is None:
            raise invalid(f"message {index}: deliver_at needs a time zone (e.g. 2026-11-22T10:00:00Z)", index=index)
        moment_ms = int(moment.timestamp() * 1000)
    latest = int(time.time() * 1000) + MAX_DELIVERY_DELAY_MS
    if not 0 <= moment_ms <= latest:
        raise invalid(f"message {index}: deliver_at must be between 1970 and one year from now", index=index)
    return moment_ms


class Prepared(msgspec.Struct):
    """One message ready for the producer."""

    value: bytes | None
    key: bytes | None
    headers: list[tuple[str, bytes | None]]
    partition: int | None
    dedup_id: str | None


def prepare(messages: list[OutgoingMessage], max_message_bytes: int, partitions: int) -> list[Prepared]:
    """Check and convert a publish batch (nothing is sent when one message is refused)."""
    if not messages:
        raise invalid("messages is empty: send at least one")
    if len(messages) > MAX_MESSAGES_PER_REQUEST:
        raise invalid(f"{len(messages)} messages in one request; at most {MAX_MESSAGES_PER_REQUEST}")
    out = []
    for index, message in enumerate(messages):
        value = _bytes_of(message.value, message.value_base64, "value", index)
        key = _bytes_of(message.key, message.key_base64, "key", index)
        headers = []
        if message.headers:  # most messages have none: no list or scan made for them
            headers = [(name, text.encode()) for name, text in message.headers.items()]
            if any(name.startswith("tideway-") for name in message.headers):
                raise invalid(f"message {index}: header names starting with 'tideway-' are reserved", index=index)
        if message.deliver_at is not None:
            headers.append((DEADLINE_HEADER, str(deadline_ms(message.deliver_at, index)).encode()))
        # As stored: one record in its own batch (brokers apply the limit to batches).
        size = BATCH_HEADER_BYTES + record_size_estimate(key, value, headers)
        if size > max_message_bytes:
            raise GatewayError("message_too_large", f"message {index} takes {size} bytes as stored (value, key, headers "
                               f"and record framing); this queue takes at most {max_message_bytes}",
                               details={"index": index, "size": size, "limit": max_message_bytes})
        if message.partition is not None and not 0 <= message.partition < partitions:
            raise invalid(f"message {index}: partition {message.partition} does not exist (0..{partitions - 1})", index=index)
        if message.dedup_id is not None and not 0 < len(message.dedup_id) <= MAX_DEDUP_ID_LENGTH:
            raise invalid(f"message {index}: dedup_id must be 1 to {MAX_DEDUP_ID_LENGTH} characters", index=index)
        out.append(Prepared(value, key, headers, message.partition, message.dedup_id))
    return out


def encode_bytes(name: str, data: bytes | None, base64_always: bool, into: dict) -> None:
    """``into[name]`` = the text, or ``into[name + "_base64"]`` when not UTF-8 (or always asked)."""
    if data is None:
        into[name] = None
    elif base64_always:
        into[f"{name}_base64"] = base64.b64encode(data).decode()
    else:
        try:
            into[name] = data.decode()
        except UnicodeDecodeError:
            into[f"{name}_base64"] = base64.b64encode(data).decode()


def message_json(*, partition: int, offset: int, timestamp_ms: int, key: bytes | None, value: bytes | None,
                 headers, base64_always: bool = False, **extra) -> dict:
    out: dict = {"partition": partition, "offset": offset, "timestamp": timestamp_ms}
    add_body(out, key, value, headers, base64_always)
    out.update(extra)
    return out


def add_body(out: dict, key: bytes | None, value: bytes | None, headers, base64_always: bool) -> None:
    """A message's key, value and headers into ``out``, as the API shows them."""
    encode_bytes("key", key, base64_always, out)
    encode_bytes("value", value, base64_always, out)
    out["headers"] = {name: (v or b"").decode(errors="replace") for name, v in headers} if headers else {}


ENCODER = msgspec.json.Encoder()
