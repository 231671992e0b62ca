"""SQS's message actions on Tideway's queue model (docs/sqs.md): send, receive, delete, change visibility.

An SQS queue is a Tideway queue in queue mode: created, changed and deleted through the control plane's actions
(quotas, placement and the audit log as from the console or REST), read and written through the gateway's
operations (rate limits, dedup windows, schemas and metering as over REST). What SQS calls receiving is the
queue group ``sqs`` of the queue, so the same messages are received over REST from ``/groups/sqs/receive``.

Names: a queue's URL is ``<endpoint>/<account>/<name>``, the account being the tenant's id in 12 digits (the
tenant's own; any other account's queues do not exist for it); ARNs are ``arn:aws:sqs:<region>:<account>:<name>``.
Message ids are the message's partition and offset written as a UUID; receipt handles name the queue and the
delivery (a handle from another queue is invalid).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import re
import time

from tideway_server.gateway import operations, publishing
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.pool import REST_ACK_LINGER_MS
from tideway_server.gateway.sqs.common import (
    GROUP,
    Context,
    as_sqs,
    batch_error,
    checked_entries,
    integer,
    queue_of,
    required,
)
from tideway_server.gateway.sqs.digests import md5_of_attributes, md5_of_body
from tideway_server.gateway.sqs.protocol import SqsError, invalid
from tideway_server.gateway.sqs.queues import queue_settings
from tideway_server.gateway.wire import OutgoingMessage

from tideway.protocol import errors as broker_errors

MAX_ATTRIBUTES = 10
TYPES_HEADER = "sqs-data-types"  # {attribute: DataType} of attributes that are not plain strings ("tideway-" is reserved)
_ATTRIBUTE_NAME = re.compile(r"^(?!\.)(?!.*\.\.)(?!.*\.$)(?!(?i:aws\.|amazon\.))[A-Za-z0-9_.-]{1,256}$")
# What SQS refuses in a body: control characters but tab, LF and CR, lone surrogates, U+FFFE and U+FFFF.
_INVALID_BODY = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


# -- message ids and receipt handles -------------------------------------------------------------------

def message_id(partition: int, offset: int) -> str:
    digits = f"{partition:08x}{offset:024x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def receipt_handle(queue: QueueInfo, receipt: str) -> str:
    return base64.urlsafe_b64encode(f"{queue.id}:{receipt}".encode()).decode()


def receipt_of(queue: QueueInfo, handle) -> tuple[int, int, int]:
    """The delivery a handle names, if it is one of this queue's; else ReceiptHandleIsInvalid."""
    try:
        queue_id, partition, offset, count = base64.urlsafe_b64decode(str(handle).encode()).decode().split(":")
        parsed = (int(partition), int(offset), int(count))
    except (ValueError, UnicodeDecodeError, binascii.Error):
        raise SqsError("ReceiptHandleIsInvalid", f"The input receipt handle \"{handle}\" is not a valid receipt "
                       "handle.") from None
    if queue_id != str(queue.id) or not 0 <= parsed[0] < queue.partitions:
        raise SqsError("ReceiptHandleIsInvalid", f"The input receipt handle \"{handle}\" is not a valid receipt handle.")
    return parsed


# -- message attributes as headers ------------------------------------------------------------------------

def _attributes_as_headers(attributes) -> dict[str, str]:
    """SQS message attributes as Tideway headers: the value as text (Binary in base64), the data type of each that
    is not "String" in one more header (so REST readers see plain headers, and SQS readers get the types back)."""
    if not attributes:
        return {}
    if not isinstance(attributes, dict):
        raise invalid("MessageAttributes must be a map")
    if len(attributes) > MAX_ATTRIBUTES:
        raise invalid(f"Number of message attributes [{len(attributes)}] exceeds the allowed maximum [{MAX_ATTRIBUTES}].")
    headers, types = {}, {}
    for name, value in attributes.items():
        if not _ATTRIBUTE_NAME.match(name) or name == TYPES_HEADER or name.startswith("tideway-"):
            raise invalid(f"Message attribute name '{name}' is invalid.")
        if not isinstance(value, dict) or not isinstance(value.get("DataType"), str):
            raise invalid(f"The message attribute '{name}' must contain a non-empty data type.")
        data_type = value["DataType"]
        base = data_type.split(".", 1)[0]
        if base == "Binary":
            if not isinstance(value.get("BinaryValue"), str):
                raise invalid(f"The message attribute '{name}' with type 'Binary' must use field 'Binary'.")
            try:
                base64.b64decode(value["BinaryValue"], validate=True)
            except binascii.Error:
                raise invalid(f"The message attribute '{name}' has a BinaryValue that is not base64.") from None
            headers[name] = value["BinaryValue"]
        elif base in ("String", "Number"):
            if not isinstance(value.get("StringValue"), str) or value["StringValue"] == "":
                raise invalid(f"The message attribute '{name}' must contain a non-empty message attribute value.")
            if base == "Number":
                try:
                    float(value["StringValue"])
                except ValueError:
                    raise invalid(f"Can't cast the value of message (user) attribute '{name}' to a number.") from None
            headers[name] = value["StringValue"]
        else:
            raise invalid(f"The message attribute '{name}' has an invalid message attribute type, the set of "
                          "supported type prefixes is Binary, Number, and String.")
        if data_type != "String":
            types[name] = data_type
    if types:
        headers[TYPES_HEADER] = json.dumps(types, separators=(",", ":"))
    return headers


def _attributes_of(headers: list[tuple[str, bytes | None]]) -> dict[str, dict]:
    # Tideway's own headers (dead-letter bookkeeping) are not the sender's attributes.
    values = {name: (value or b"").decode(errors="replace") for name, value in headers if not name.startswith("tideway-")}
    types = {}
    if TYPES_HEADER in values:
        try:
            types = json.loads(values.pop(TYPES_HEADER))
        except ValueError:
            types = {}
    out = {}
    for name, text in values.items():
        data_type = types.get(name, "String")
        if data_type.split(".", 1)[0] == "Binary":
            out[name] = {"DataType": data_type, "BinaryValue": text}
        else:
            out[name] = {"DataType": data_type, "StringValue": text}
    return out


def _wanted(attributes: dict[str, dict], names) -> dict[str, dict]:
    """The attributes a receive asked for (names, "All", ".*" or "prefix.*")."""
    if not names:
        return {}
    if "All" in names or ".*" in names:
        return attributes
    return {name: value for name, value in attributes.items()
            if name in names or any(n.endswith(".*") and name.startswith(n[:-1]) for n in names)}


# -- sending ------------------------------------------------------------------------------------------

def _outgoing(fifo: bool, content_dedup: bool, entry: dict) -> OutgoingMessage:
    body = entry.get("MessageBody")
    if body is None or body == "":
        raise SqsError("MissingParameter", "The request must contain the parameter MessageBody.")
    if not isinstance(body, str):
        raise invalid("MessageBody must be a string")
    if _INVALID_BODY.search(body):
        raise SqsError("InvalidMessageContents", "Invalid characters found in the message body (SQS allows "
                       "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF).")
    delay = integer(entry, "DelaySeconds", 0, 900)
    group, dedup = entry.get("MessageGroupId"), entry.get("MessageDeduplicationId")
    if fifo:
        if delay:
            raise invalid(f"Value {delay} for parameter DelaySeconds is invalid. Reason: The request include "
                          "parameter that is not valid for this queue type.")
        if not group:
            raise SqsError("MissingParameter", "The request must contain the parameter MessageGroupId.")
        if not dedup:
            if not content_dedup:
                raise invalid("The queue should either have ContentBasedDeduplication enabled or "
                              "MessageDeduplicationId provided explicitly")
            dedup = hashlib.sha256(body.encode()).hexdigest()
    elif dedup:
        raise invalid("The request includes a parameter that is not valid for this queue type: "
                      "MessageDeduplicationId")
    deliver_at = None if delay is None else int(time.time() * 1000) + delay * 1000
    return OutgoingMessage(value=body, key=group or None, headers=_attributes_as_headers(entry.get("MessageAttributes")),
                           deliver_at=deliver_at, dedup_id=dedup or None)


async def _publish(ctx: Context, queue: QueueInfo, messages: list[OutgoingMessage]) -> list[tuple[int, int]]:
    """Publish, answering for each message where it is; a message whose dedup id was seen in the window is
    where its first copy went (SQS answers a duplicate as a success)."""
    where: dict[int, tuple[int, int]] = {}
    pending = list(range(len(messages)))
    for attempt in range(20):
        try:
            results = await publishing.publish(ctx.caller, queue, [messages[i] for i in pending])
        except GatewayError as exc:
            if exc.code == "duplicate_message" and "duplicates" in exc.details:
                repeated = set()
                for duplicate in exc.details["duplicates"]:
                    index = pending[duplicate["index"]]
                    if "partition" in duplicate:
                        where[index] = (duplicate["partition"], duplicate["offset"])
                        repeated.add(index)
                    else:  # the same id twice in this request: the first one stands for both
                        repeated.add(index)
                        where.setdefault(index, None)
                pending = [i for i in pending if i not in repeated]
                if not pending:
                    break
                continue
            if exc.code == "publish_in_progress" and attempt < 19:
                await asyncio.sleep(0.5)
                continue
            raise
        for index, result in zip(pending, results, strict=True):
            where[index] = (result["partition"], result["offset"])
        break
    # An id repeated inside one request: its later copies are where the first copy went.
    ids = {}
    for index, message in enumerate(messages):
        if message.dedup_id and where.get(index) is not None:
            ids.setdefault(message.dedup_id, where[index])
    return [where.get(i) or ids[messages[i].dedup_id] for i in range(len(messages))]


def _sent(entry: dict, place: tuple[int, int]) -> dict:
    out = {"MessageId": message_id(*place), "MD5OfMessageBody": md5_of_body(entry["MessageBody"])}
    digest = md5_of_attributes(entry.get("MessageAttributes") or {})
    if digest:
        out["MD5OfMessageAttributes"] = digest
    return out


async def send_message(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "produce")
    fifo, content_dedup = _fifo_settings(queue)
    [place] = await _publish(ctx, queue, [_outgoing(fifo, content_dedup, params)])
    answer = _sent(params, place)
    if fifo:
        answer["SequenceNumber"] = str(place[1])
    return answer


async def send_message_batch(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "produce")
    entries = checked_entries(params, "SendMessageBatchRequestEntry")
    fifo, content_dedup = _fifo_settings(queue)
    failed, good = [], []
    for entry in entries:
        try:
            good.append((entry, _outgoing(fifo, content_dedup, entry)))
        except SqsError as error:
            failed.append(batch_error(entry["Id"], error))
    total = sum(len(entry["MessageBody"].encode()) for entry, _ in good)
    if total > queue.max_message_bytes:
        raise SqsError("BatchRequestTooLong", f"Batch requests cannot be longer than {queue.max_message_bytes} bytes. "
                       f"You have sent {total} bytes.")
    successful = []
    if good:
        places = await _publish(ctx, queue, [message for _, message in good])
        for (entry, _message), place in zip(good, places, strict=True):
            answer = {"Id": entry["Id"], **_sent(entry, place)}
            if fifo:
                answer["SequenceNumber"] = str(place[1])
            successful.append(answer)
    return {"Successful": successful, "Failed": failed}


# -- receiving and settling ---------------------------------------------------------------------------

async def receive_message(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "consume")
    count = integer(params, "MaxNumberOfMessages", 1, 10, default=1)
    settings = queue_settings(queue)
    wait = integer(params, "WaitTimeSeconds", 0, 20, default=settings.get("receive_wait_seconds", 0))
    visibility = integer(params, "VisibilityTimeout", 0, 43_200)
    if visibility == 0:
        raise invalid("VisibilityTimeout 0 would hand the messages out again at once: give 1 to 43200 seconds "
                      "(docs/sqs.md, differences)")
    system_names = set(params.get("AttributeNames") or []) | set(params.get("MessageSystemAttributeNames") or [])
    messages = await operations.receive(ctx.caller, queue, GROUP, max_messages=count, wait_seconds=wait,
                                        visibility_timeout=visibility)
    out = []
    for message in messages:
        body = (message.value or b"").decode(errors="replace")
        attributes = _wanted(_attributes_of(message.headers), params.get("MessageAttributeNames") or [])
        item = {"MessageId": message_id(message.partition, message.offset),
                "ReceiptHandle": receipt_handle(queue, message.receipt), "MD5OfBody": md5_of_body(body), "Body": body}
        system = _system_attributes(message, system_names)
        if system:
            item["Attributes"] = system
        if attributes:
            item["MD5OfMessageAttributes"] = md5_of_attributes(attributes)
            item["MessageAttributes"] = attributes
        out.append(item)
    return {"Messages": out} if out else {}


def _system_attributes(message, names: set[str]) -> dict[str, str]:
    if not names:
        return {}
    every = {"All"} & names
    values = {"ApproximateReceiveCount": str(message.delivery_count), "SentTimestamp": str(message.timestamp_ms),
              "ApproximateFirstReceiveTimestamp": str(message.timestamp_ms)}
    if message.key is not None:
        values["MessageGroupId"] = message.key.decode(errors="replace")
        values["SequenceNumber"] = str(message.offset)
    return {name: value for name, value in values.items() if every or name in names}


async def delete_message(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "consume")
    receipt = receipt_of(queue, required(params, "ReceiptHandle"))
    consumer = await operations.queue_consumer(ctx.caller, queue, GROUP)
    try:
        await consumer.ack([receipt], linger_ms=REST_ACK_LINGER_MS)  # the client waits for the answer
    except broker_errors.InvalidRecordStateError:
        pass  # SQS: deleting with a handle whose message went back or was deleted succeeds (docs/sqs.md)
    except broker_errors.TidewayError as exc:
        raise as_sqs(operations.broker_failure(exc)) from None
    return {}


async def delete_message_batch(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "consume")
    entries = checked_entries(params, "DeleteMessageBatchRequestEntry")
    consumer = await operations.queue_consumer(ctx.caller, queue, GROUP)
    successful, failed, pending = [], [], []
    for entry in entries:
        try:
            receipt = receipt_of(queue, entry.get("ReceiptHandle", ""))
            pending.append((entry["Id"], consumer.ack([receipt], linger_ms=REST_ACK_LINGER_MS)))
        except SqsError as error:
            failed.append(batch_error(entry["Id"], error))
    for entry_id, future in pending:
        try:
            await future
        except broker_errors.InvalidRecordStateError:
            pass  # as DeleteMessage
        except broker_errors.TidewayError as exc:
            failed.append(batch_error(entry_id, as_sqs(operations.broker_failure(exc))))
            continue
        successful.append({"Id": entry_id})
    return {"Successful": successful, "Failed": failed}


async def _change_visibility(consumer, queue: QueueInfo, handle, seconds) -> None:
    receipt = receipt_of(queue, handle)
    seconds = integer({"VisibilityTimeout": seconds}, "VisibilityTimeout", 0, 43_200)
    if seconds is None:
        raise SqsError("MissingParameter", "The request must contain the parameter VisibilityTimeout.")
    try:
        if seconds == 0:
            await consumer.nack([receipt], delay_ms=0)
        else:
            await consumer.extend([receipt], seconds * 1000)
    except broker_errors.InvalidRecordStateError:
        raise SqsError("MessageNotInflight", "The message referred to isn't in flight.") from None
    except broker_errors.TidewayError as exc:
        raise as_sqs(operations.broker_failure(exc)) from None


async def change_message_visibility(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "consume")
    consumer = await operations.queue_consumer(ctx.caller, queue, GROUP)
    await _change_visibility(consumer, queue, required(params, "ReceiptHandle"), params.get("VisibilityTimeout"))
    return {}


async def change_message_visibility_batch(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "consume")
    entries = checked_entries(params, "ChangeMessageVisibilityBatchRequestEntry")
    consumer = await operations.queue_consumer(ctx.caller, queue, GROUP)

    async def one(entry: dict) -> dict:
        try:
            await _change_visibility(consumer, queue, entry.get("ReceiptHandle", ""), entry.get("VisibilityTimeout"))
        except SqsError as error:
            return batch_error(entry["Id"], error)
        return {"Id": entry["Id"]}

    results = await asyncio.gather(*(one(entry) for entry in entries))
    return {"Successful": [r for r in results if "Code" not in r], "Failed": [r for r in results if "Code" in r]}


def _fifo_settings(queue: QueueInfo) -> tuple[bool, bool]:
    """(FIFO, content-based deduplication) of the queue."""
    return queue.fifo, queue_settings(queue).get("content_based_deduplication", False)
