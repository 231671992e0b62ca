"""SQS's two wire protocols: requests into one shape, results and errors out in the caller's protocol.

* AWS JSON 1.0 (boto3 since 1.34, the AWS JavaScript SDK v3): ``POST`` with ``X-Amz-Target: AmazonSQS.<Action>``
  and a JSON body whose members are the API's names; answers are JSON; errors carry the legacy query error code
  in ``x-amzn-query-error`` (``Code;Sender``), which SDKs report as the error's code.
* The query protocol (older SDKs, e.g. Debian's python3-boto3 1.26): form fields (``Action=SendMessage&
  MessageAttribute.1.Name=...``) in the body or the URL; answers are XML in the 2012-11-05 namespace.

Requests of both become ``SqsRequest(action, params)`` with ``params`` in the JSON protocol's shape, so the
actions (sqs/service.py) never see which protocol was spoken.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

import msgspec

XML_NAMESPACE = "http://queue.amazonaws.com/doc/2012-11-05/"
JSON_CONTENT_TYPE = "application/x-amz-json-1.0"
MAX_REQUEST_BYTES = 1_100_000  # a batch of 10 messages of SQS's largest size (1 MiB in all), and the envelope

# SQS's errors: name -> (legacy query code, HTTP status). The name is the JSON protocol's error shape.
ERRORS = {
    "QueueDoesNotExist": ("AWS.SimpleQueueService.NonExistentQueue", 400),
    "QueueNameExists": ("QueueAlreadyExists", 400),
    "QueueDeletedRecently": ("AWS.SimpleQueueService.QueueDeletedRecently", 400),
    "InvalidParameterValue": ("InvalidParameterValue", 400),
    "MissingParameter": ("MissingParameter", 400),
    "InvalidAction": ("InvalidAction", 400),
    "UnsupportedOperation": ("AWS.SimpleQueueService.UnsupportedOperation", 400),
    "InvalidAttributeName": ("InvalidAttributeName", 400),
    "InvalidAttributeValue": ("InvalidAttributeValue", 400),
    "InvalidMessageContents": ("InvalidMessageContents", 400),
    "ReceiptHandleIsInvalid": ("ReceiptHandleIsInvalid", 400),
    "MessageNotInflight": ("AWS.SimpleQueueService.MessageNotInflight", 400),
    "EmptyBatchRequest": ("AWS.SimpleQueueService.EmptyBatchRequest", 400),
    "TooManyEntriesInBatchRequest": ("AWS.SimpleQueueService.TooManyEntriesInBatchRequest", 400),
    "BatchEntryIdsNotDistinct": ("AWS.SimpleQueueService.BatchEntryIdsNotDistinct", 400),
    "InvalidBatchEntryId": ("AWS.SimpleQueueService.InvalidBatchEntryId", 400),
    "BatchRequestTooLong": ("AWS.SimpleQueueService.BatchRequestTooLong", 400),
    "PurgeQueueInProgress": ("AWS.SimpleQueueService.PurgeQueueInProgress", 403),
    "OverLimit": ("OverLimit", 403),
    "RequestThrottled": ("RequestThrottled", 403),
    "ResourceNotFoundException": ("ResourceNotFoundException", 404),
    "AccessDenied": ("AccessDenied", 403),
    "InvalidClientTokenId": ("InvalidClientTokenId", 403),
    "SignatureDoesNotMatch": ("SignatureDoesNotMatch", 403),
    "MissingAuthenticationToken": ("MissingAuthenticationToken", 403),
    "IncompleteSignature": ("IncompleteSignature", 400),
    "RequestExpired": ("RequestExpired", 400),
    "ServiceUnavailable": ("ServiceUnavailable", 503),
    "InternalError": ("InternalError", 500),
}


class SqsError(Exception):
    """A refusal in SQS's vocabulary (``name``: a key of ERRORS)."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name, self.message = name, message
        self.code, self.status = ERRORS[name]


def invalid(message: str) -> SqsError:
    return SqsError("InvalidParameterValue", message)


@dataclass(frozen=True)
class SqsRequest:
    action: str
    params: dict
    protocol: str  # "json" or "query"


def parse(method: str, path_query: str, headers: dict[str, str], body: bytes) -> SqsRequest:
    """The request as an action and its parameters (JSON shape); SqsError when it is neither protocol's."""
    target = headers.get("x-amz-target", "")
    if target:
        service, _, action = target.partition(".")
        if service != "AmazonSQS" or not action:
            raise SqsError("InvalidAction", f"X-Amz-Target {target!r} is not AmazonSQS.<Action>")
        try:
            params = msgspec.json.decode(body or b"{}")
        except (ValueError, msgspec.DecodeError):
            raise SqsError("InvalidParameterValue", "the body is not JSON") from None
        if not isinstance(params, dict):
            raise SqsError("InvalidParameterValue", "the body is not a JSON object")
        return SqsRequest(action, params, "json")
    fields = parse_qsl(path_query, keep_blank_values=True)
    if method == "POST":
        try:
            fields += parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise SqsError("InvalidParameterValue", "the form body is not UTF-8") from None
    flat = dict(fields)
    action = flat.pop("Action", "")
    if not action:
        raise SqsError("MissingParameter", "the request names no action (X-Amz-Target for JSON, Action= for the "
                       "query protocol)")
    flat.pop("Version", None)
    return SqsRequest(action, query_params(action, flat), "query")


# -- the query protocol's fields into the JSON shape ------------------------------------------------

_LISTS = {"AttributeName": "AttributeNames", "MessageAttributeName": "MessageAttributeNames",
          "MessageSystemAttributeName": "MessageSystemAttributeNames", "TagKey": "TagKeys",
          "SendMessageBatchRequestEntry": "Entries", "DeleteMessageBatchRequestEntry": "Entries",
          "ChangeMessageVisibilityBatchRequestEntry": "Entries", "StringListValue": "StringListValues",
          "BinaryListValue": "BinaryListValues"}
_MAPS = {"Attribute": ("Attributes", "Name", "Value"), "Tag": ("Tags", "Key", "Value"),
         "MessageAttribute": ("MessageAttributes", "Name", "Value"),
         "MessageSystemAttribute": ("MessageSystemAttributes", "Name", "Value")}
_INTEGERS = {"DelaySeconds", "MaxNumberOfMessages", "VisibilityTimeout", "WaitTimeSeconds", "MaxResults",
             "MaxNumberOfMessagesPerSecond"}
_INDEX = re.compile(r"^[1-9][0-9]{0,4}$")


def query_params(action: str, flat: dict[str, str]) -> dict:
    """``Attribute.1.Name=X&Attribute.1.Value=Y`` -> ``{"Attributes": {"X": "Y"}}``, and so on for every list and
    map SQS's query protocol flattens."""
    tree: dict = {}
    for name, value in flat.items():
        node, parts = tree, name.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise invalid(f"parameter {name!r} conflicts with another")
        if isinstance(node.get(parts[-1]), dict):
            raise invalid(f"parameter {name!r} conflicts with another")
        node[parts[-1]] = value
    converted = _convert(tree)
    if action == "CreateQueue" and "Tags" in converted:
        converted["tags"] = converted.pop("Tags")  # CreateQueue's member is "tags"
    return converted


def _convert(tree: dict) -> dict:
    out: dict = {}
    for name, value in tree.items():
        if name in _LISTS:
            out[_LISTS[name]] = [_convert(v) if isinstance(v, dict) else v for v in _numbered(name, value)]
        elif name in _MAPS:
            target, key_field, value_field = _MAPS[name]
            entries = {}
            for entry in _numbered(name, value):
                if not isinstance(entry, dict) or key_field not in entry:
                    raise invalid(f"{name}.N needs .{key_field} and .{value_field}")
                inner = entry.get(value_field, "")
                entries[entry[key_field]] = _convert(inner) if isinstance(inner, dict) else inner
            out[target] = entries
        elif name in _INTEGERS:
            try:
                out[name] = int(value)
            except (TypeError, ValueError):
                raise invalid(f"{name} must be an integer, not {value!r}") from None
        else:
            out[name] = _convert(value) if isinstance(value, dict) else value
    return out


def _numbered(name: str, value) -> list:
    if not isinstance(value, dict) or not all(_INDEX.match(k) for k in value):
        raise invalid(f"{name} takes numbered members ({name}.1, {name}.2, ...)")
    return [value[k] for k in sorted(value, key=int)]


# -- answers ------------------------------------------------------------------------------------------

def request_id() -> str:
    return str(uuid.uuid4())


def success(request: SqsRequest, result: dict, rid: str) -> tuple[int, dict[str, str], bytes]:
    if request.protocol == "json":
        return 200, {"content-type": JSON_CONTENT_TYPE, "x-amzn-requestid": rid}, msgspec.json.encode(result)
    inner = _xml_members(request.action, result)
    result_element = "" if request.action in _NO_RESULT else f"<{request.action}Result>{inner}</{request.action}Result>"
    body = (f'<?xml version="1.0"?><{request.action}Response xmlns="{XML_NAMESPACE}">{result_element}'
            f"<ResponseMetadata><RequestId>{rid}</RequestId></ResponseMetadata></{request.action}Response>")
    return 200, {"content-type": "text/xml", "x-amzn-requestid": rid}, body.encode()


def failure(protocol: str, error: SqsError, rid: str) -> tuple[int, dict[str, str], bytes]:
    fault = "Sender" if error.status < 500 else "Receiver"
    if protocol == "json":
        body = {"__type": f"com.amazonaws.sqs#{error.name}", "message": error.message}
        return error.status, {"content-type": JSON_CONTENT_TYPE, "x-amzn-requestid": rid,
                              "x-amzn-query-error": f"{error.code};{fault}"}, json.dumps(body).encode()
    body = (f'<?xml version="1.0"?><ErrorResponse xmlns="{XML_NAMESPACE}"><Error><Type>{fault}</Type>'
            f"<Code>{escape(error.code)}</Code><Message>{escape(error.message)}</Message><Detail/></Error>"
            f"<RequestId>{rid}</RequestId></ErrorResponse>")
    return error.status, {"content-type": "text/xml", "x-amzn-requestid": rid}, body.encode()


# Actions whose query answer has no result element (only the metadata); every other one has it, empty or not
# (SDKs look for it: an empty ReceiveMessageResult is how a long poll that found nothing answers).
_NO_RESULT = {"DeleteMessage", "DeleteQueue", "PurgeQueue", "SetQueueAttributes", "TagQueue", "UntagQueue",
              "ChangeMessageVisibility"}

# Flattened lists in query answers: member -> the element each item is written as.
_RESULT_LISTS = {"QueueUrls": "QueueUrl", "queueUrls": "QueueUrl", "Messages": "Message", "Failed": "BatchResultErrorEntry",
                 "Results": "ListMessageMoveTasksResultEntry"}
_RESULT_ENTRIES = {"SendMessageBatch": "SendMessageBatchResultEntry", "DeleteMessageBatch": "DeleteMessageBatchResultEntry",
                   "ChangeMessageVisibilityBatch": "ChangeMessageVisibilityBatchResultEntry"}
_RESULT_MAPS = {"Attributes": ("Attribute", "Name", "Value"), "MessageAttributes": ("MessageAttribute", "Name", "Value"),
                "Tags": ("Tag", "Key", "Value")}


def _xml_members(action: str, result: dict) -> str:
    parts = []
    for name, value in result.items():
        if isinstance(value, list):
            element = _RESULT_ENTRIES[action] if name == "Successful" else _RESULT_LISTS.get(name, name)
            parts += [f"<{element}>{_xml_value(action, item)}</{element}>" for item in value]
        elif isinstance(value, dict) and name in _RESULT_MAPS:
            element, key_field, value_field = _RESULT_MAPS[name]
            parts += [f"<{element}><{key_field}>{escape(k)}</{key_field}><{value_field}>{_xml_value(action, v)}"
                      f"</{value_field}></{element}>" for k, v in value.items()]
        else:
            parts.append(f"<{name}>{_xml_value(action, value)}</{name}>")
    return "".join(parts)


def _xml_value(action: str, value) -> str:
    if isinstance(value, dict):
        return _xml_members(action, value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))
