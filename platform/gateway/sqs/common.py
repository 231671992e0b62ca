"""What every SQS action needs: who calls (``Context``), the queue a URL names, parameters checked as SQS checks
them, and the gateway's refusals in SQS's words."""

from __future__ import annotations

import re
from dataclasses import dataclass

from tideway_server.gateway import catalog
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.sqs.protocol import SqsError, invalid

GROUP = "sqs"  # the queue group SQS's receives are
MAX_BATCH = 10
_ENTRY_ID = re.compile(r"^[A-Za-z0-9_-]{1,80}$")


@dataclass
class Context:
    caller: Caller
    endpoint: str  # the SQS endpoint's URL, e.g. http://127.0.0.1:8000/sqs
    region: str
    queue: QueueInfo | None = None  # the queue the request named, once found: it is metered to it

    @property
    def account(self) -> str:
        return f"{self.caller.tenant_id:012d}"

    def queue_url(self, name: str) -> str:
        return f"{self.endpoint}/{self.account}/{name}"

    def arn(self, name: str) -> str:
        return f"arn:aws:sqs:{self.region}:{self.account}:{name}"


_SQS_NAMES = {"queue_not_found": "QueueDoesNotExist", "forbidden": "AccessDenied", "throttled": "RequestThrottled",
              "invalid_request": "InvalidParameterValue", "message_too_large": "InvalidParameterValue",
              "schema_violation": "InvalidMessageContents", "receipt_expired": "ReceiptHandleIsInvalid",
              "quota_exceeded": "OverLimit", "publish_in_progress": "ServiceUnavailable"}


def as_sqs(exc: GatewayError) -> SqsError:
    """The gateway's refusal in SQS's words; one it has no word for is a bad parameter, or (5xx) unavailability."""
    default = "ServiceUnavailable" if exc.status >= 500 else "InvalidParameterValue"
    return SqsError(_SQS_NAMES.get(exc.code, default), exc.message)


# -- parameters -------------------------------------------------------------------------------------

def required(params: dict, name: str) -> str:
    value = params.get(name)
    if value is None or value == "":
        raise SqsError("MissingParameter", f"the request must contain the parameter {name}")
    if not isinstance(value, str):
        raise invalid(f"{name} must be a string")
    return value


def integer(params: dict, name: str, low: int, high: int, default: int | None = None) -> int | None:
    value = params.get(name, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            value = int(value)
        except (TypeError, ValueError):
            raise invalid(f"{name} must be an integer") from None
    if not low <= value <= high:
        raise invalid(f"Value {value} for parameter {name} is invalid. Reason: must be between {low} and {high}.")
    return value


async def queue_of(ctx: Context, params: dict) -> QueueInfo:
    """The queue a QueueUrl names, if the caller's tenant has it and the key may touch it; else QueueDoesNotExist
    (the same answer whether it exists nowhere or belongs to another tenant)."""
    return await queue_at(ctx, required(params, "QueueUrl"))


async def queue_at(ctx: Context, url: str) -> QueueInfo:
    parts = url.rstrip("/").split("/")
    name = parts[-1] if len(parts) >= 2 else ""
    if len(parts) < 2 or parts[-2] != ctx.account or not ctx.caller.may_touch(name):
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    queue = await catalog.queue_named(ctx.caller.tenant_id, name)
    if queue is None or not queue.is_queue:
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    ctx.queue = queue
    return queue


def checked_entries(params: dict, kind: str) -> list[dict]:
    entries = params.get("Entries")
    if not entries:
        raise SqsError("EmptyBatchRequest", f"There should be at least one {kind} in the request.")
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise invalid("Entries must be a list of entries")
    if len(entries) > MAX_BATCH:
        raise SqsError("TooManyEntriesInBatchRequest", f"Maximum number of entries per request are {MAX_BATCH}. "
                       f"You have sent {len(entries)}.")
    seen = set()
    for entry in entries:
        entry_id = entry.get("Id")
        if not isinstance(entry_id, str) or not _ENTRY_ID.match(entry_id):
            raise SqsError("InvalidBatchEntryId", "A batch entry id can only contain alphanumeric characters, "
                           "hyphens and underscores. It can be at most 80 letters long.")
        if entry_id in seen:
            raise SqsError("BatchEntryIdsNotDistinct", f"Id {entry_id} repeated.")
        seen.add(entry_id)
    return entries


def batch_error(entry_id: str, error: SqsError) -> dict:
    return {"Id": entry_id, "SenderFault": error.status < 500, "Code": error.code, "Message": error.message}


