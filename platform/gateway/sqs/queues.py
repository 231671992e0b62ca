"""SQS's queue actions: create, find, list, attributes, tags, purge, delete (docs/sqs.md).

A queue is created, changed and deleted through the control plane's actions, as from the console or REST (quotas,
placement, the audit log); SQS's attributes map onto the queue's settings where Tideway has them, and the rest
(receive wait, content-based deduplication, tags) live in ``Queue.sqs_settings``.
"""

from __future__ import annotations

import base64
import binascii
import json
import re

from asgiref.sync import sync_to_async
from tideway_server.gateway import catalog, operations
from tideway_server.gateway.catalog import QueueInfo
from tideway_server.gateway.sqs.common import Context, integer, queue_of, required
from tideway_server.gateway.sqs.counts import counts
from tideway_server.gateway.sqs.protocol import SqsError, invalid

SQS_PARTITIONS = 3  # partitions of a queue made over SQS (per-group order holds on any number)
DEFAULT_MAX_MESSAGE_BYTES = 262_144
_NAME = re.compile(r"^[A-Za-z0-9_-]{1,80}$")
_FIFO_NAME = re.compile(r"^[A-Za-z0-9_-]{1,75}\.fifo$")
MAX_TAGS = 50

# Attribute -> (low, high) of those that are integers in seconds or bytes.
_RANGES = {"VisibilityTimeout": (1, 43_200), "DelaySeconds": (0, 900), "MaximumMessageSize": (1_024, 1_048_576),
           "MessageRetentionPeriod": (60, 1_209_600), "ReceiveMessageWaitTimeSeconds": (0, 20)}
_SETTABLE = {*_RANGES, "ContentBasedDeduplication", "RedrivePolicy", "RedriveAllowPolicy", "DeduplicationScope",
             "FifoThroughputLimit", "SqsManagedSseEnabled"}
NO_REDRIVE_DELIVERIES = 1_000  # without a RedrivePolicy: the most deliveries Tideway allows (SQS: no limit)
_READ_ONLY = {"ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible", "ApproximateNumberOfMessagesDelayed",
              "CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"}


def queue_settings(queue: QueueInfo) -> dict:
    """The queue's SQS settings, with ``fifo``."""
    return {**(queue.sqs_settings or {}), "fifo": queue.fifo}


def _action_error(exc) -> SqsError:
    name = {"queue_exists": "QueueNameExists", "quota_exceeded": "OverLimit", "cluster_unavailable": "ServiceUnavailable",
            "cluster_error": "ServiceUnavailable", "queue_busy": "QueueDeletedRecently"}.get(exc.code, "InvalidParameterValue")
    return SqsError(name, exc.message)


def _values(attributes: dict, *, fifo: bool, creating: bool) -> tuple[dict, dict]:
    """(the queue's settings, its SQS settings) that ``attributes`` give; SQS's errors for what it refuses."""
    if not isinstance(attributes, dict):
        raise invalid("Attributes must be a map of names to values")
    values: dict = {}
    sqs: dict = {}
    for name, raw in attributes.items():
        if name == "FifoQueue":
            if not creating:
                raise SqsError("InvalidAttributeName", "FifoQueue is set when the queue is created")
            continue
        if name in _READ_ONLY or name not in _SETTABLE:
            raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
        value = str(raw)
        if name in _RANGES:
            low, high = _RANGES[name]
            if not value.lstrip("-").isdigit() or not low <= int(value) <= high:
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}." +
                               (" Tideway's visibility timeout is at least 1 second (docs/sqs.md)."
                                if name == "VisibilityTimeout" and value == "0" else ""))
            number = int(value)
            if name == "VisibilityTimeout":
                values["visibility_timeout_ms"] = number * 1000
            elif name == "DelaySeconds":
                values["delivery_delay_ms"] = number * 1000
            elif name == "MaximumMessageSize":
                values["max_message_bytes"] = number
            elif name == "MessageRetentionPeriod":
                values["retention_ms"] = number * 1000
            else:
                sqs["receive_wait_seconds"] = number
        elif name == "ContentBasedDeduplication":
            if not fifo:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
            if value.lower() not in ("true", "false"):
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
            sqs["content_based_deduplication"] = value.lower() == "true"
        elif name in ("DeduplicationScope", "FifoThroughputLimit"):
            if not fifo:
                raise SqsError("InvalidAttributeName", f"Unknown Attribute {name}.")
            sqs[name] = value
        elif name == "SqsManagedSseEnabled":
            if value.lower() not in ("true", "false"):
                raise SqsError("InvalidAttributeValue", f"Invalid value for the parameter {name}.")
        elif name == "RedrivePolicy":
            sqs["redrive_policy"] = value  # resolved by _redrive (it names another queue)
        else:  # RedriveAllowPolicy: kept and shown
            sqs["redrive_allow_policy"] = value
    return values, sqs


async def create_queue(ctx: Context, params: dict) -> dict:
    operations.require_scope(ctx.caller, "manage")
    name = required(params, "QueueName")
    attributes = params.get("Attributes") or {}
    if not isinstance(attributes, dict):
        raise invalid("Attributes must be a map of names to values")
    fifo_text = str(attributes.get("FifoQueue", "false")).lower()
    if fifo_text not in ("true", "false"):
        raise SqsError("InvalidAttributeValue", "Invalid value for the parameter FifoQueue.")
    fifo = fifo_text == "true"
    if fifo and not _FIFO_NAME.match(name):
        raise invalid("The name of a FIFO queue can only include alphanumeric characters, hyphens, or underscores, "
                      "must end with .fifo suffix and be 1 to 80 in length.")
    if not fifo and not _NAME.match(name):
        raise invalid("Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length")
    if not ctx.caller.may_touch(name):
        raise SqsError("AccessDenied", f"this API key may not touch queue {name!r} (its queue patterns)")
    values, sqs = _values(attributes, fifo=fifo, creating=True)
    values.update(await _redrive(ctx, sqs.pop("redrive_policy", ""), fifo=fifo, name=name))
    tags = _tags(params.get("tags") or params.get("Tags") or {})
    if tags:
        sqs["tags"] = tags
    existing = await catalog.queue_named(ctx.caller.tenant_id, name)
    if existing is None:
        try:
            await sync_to_async(_create)(ctx, name, fifo, values, sqs)
        except SqsError as exc:
            if exc.name != "QueueNameExists":
                raise
        catalog.forget(ctx.caller.tenant_id, name)
        existing = await catalog.queue_named(ctx.caller.tenant_id, name)
        if existing is None:
            raise SqsError("ServiceUnavailable", "the queue was created but cannot be read back yet; retry")
        return {"QueueUrl": ctx.queue_url(name)}
    # SQS: creating a queue that exists answers its URL when the attributes given are the ones it has.
    if not existing.is_queue or existing.fifo != fifo or _differs(existing, values, sqs):
        raise SqsError("QueueNameExists", f"A queue already exists with the same name and a different value for "
                       f"attribute(s) {', '.join(sorted(attributes)) or 'FifoQueue'}")
    return {"QueueUrl": ctx.queue_url(name)}


async def _redrive(ctx: Context, policy: str, *, fifo: bool, name: str) -> dict:
    """The queue settings a RedrivePolicy ("" removes it) stands for: the dead-letter queue and the deliveries."""
    if not policy:
        return {"dead_letter_queue_id": None, "max_deliveries": NO_REDRIVE_DELIVERIES}
    try:
        parsed = json.loads(policy)
        target, count = parsed["deadLetterTargetArn"], int(parsed["maxReceiveCount"])
    except (ValueError, KeyError, TypeError):
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Redrive policy "
                       "is not a valid JSON map of deadLetterTargetArn and maxReceiveCount.") from None
    if not 1 <= count <= 1000:
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Invalid value "
                       "for maxReceiveCount: must be an integer from 1 to 1000.")
    target_name = _name_in_arn(ctx, str(target))
    dead = await catalog.queue_named(ctx.caller.tenant_id, target_name) if target_name else None
    if dead is None or not dead.is_queue or not ctx.caller.may_touch(target_name):
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Dead letter "
                       "target does not exist.")
    if target_name == name:
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: a queue cannot "
                       "be its own dead-letter queue.")
    if dead.fifo != fifo:
        raise SqsError("InvalidAttributeValue", "Value for parameter RedrivePolicy is invalid. Reason: Dead-letter "
                       "target owner should be the same queue type (FIFO or standard).")
    return {"dead_letter_queue_id": dead.id, "max_deliveries": count}


def _name_in_arn(ctx: Context, arn: str) -> str | None:
    """The queue name of an ARN of the caller's account (any other account's queues do not exist for it)."""
    parts = arn.split(":")
    if len(parts) != 6 or parts[:3] != ["arn", "aws", "sqs"] or parts[4] != ctx.account:
        return None
    return parts[5]


def _differs(queue: QueueInfo, values: dict, sqs: dict) -> bool:
    current = {"visibility_timeout_ms": queue.visibility_timeout_ms, "max_message_bytes": queue.max_message_bytes}
    if any(field in current and current[field] != value for field, value in values.items()):
        return True
    settings = queue.sqs_settings or {}
    return any(settings.get(field) != value for field, value in sqs.items() if field != "tags")


def _create(ctx: Context, name: str, fifo: bool, values: dict, sqs: dict) -> None:
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.topics.actions import do_create_queue

    tenant = ctx.caller.principal.tenant
    values = {"name": name, "mode": "queue", "partitions": SQS_PARTITIONS, "fifo": fifo,
              "max_message_bytes": min(DEFAULT_MAX_MESSAGE_BYTES, ctx.caller.limits.max_message_bytes), **values,
              "sqs_settings": sqs}
    values.setdefault("retention_ms", 4 * 24 * 3600 * 1000)  # SQS's default, 4 days (max_deliveries: _redrive's)
    try:
        do_create_queue(tenant, values, acting=ctx.caller.principal.actor)
    except ActionError as exc:
        raise _action_error(exc) from None


async def get_queue_url(ctx: Context, params: dict) -> dict:
    name = required(params, "QueueName")
    owner = params.get("QueueOwnerAWSAccountId")
    if owner and owner != ctx.account:
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    await queue_of(ctx, {"QueueUrl": ctx.queue_url(name)})
    return {"QueueUrl": ctx.queue_url(name)}


async def list_queues(ctx: Context, params: dict) -> dict:
    prefix = params.get("QueueNamePrefix") or ""
    limit = integer(params, "MaxResults", 1, 1000)
    after = ""
    if params.get("NextToken"):
        try:
            after = base64.urlsafe_b64decode(str(params["NextToken"]).encode()).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise invalid("Invalid NextToken value.") from None
    names = await sync_to_async(_queue_names)(ctx.caller.tenant_id, prefix, after)
    names = [n for n in names if ctx.caller.may_touch(n)]
    page = names[:limit or 1000]
    answer: dict = {"QueueUrls": [ctx.queue_url(n) for n in page]} if page else {}
    if limit and len(names) > limit:
        answer["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    return answer


def _queue_names(tenant_id: int, prefix: str, after: str) -> list[str]:
    from django.db import close_old_connections
    from tideway_server.topics.choices import QueueMode, QueueStatus
    from tideway_server.topics.models import Queue

    close_old_connections()
    rows = Queue.objects.filter(tenant_id=tenant_id, mode=QueueMode.QUEUE, status=QueueStatus.READY,
                                name__startswith=prefix, name__gt=after).order_by("name")
    return list(rows.values_list("name", flat=True)[:2001])


async def get_queue_attributes(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    names = set(params.get("AttributeNames") or [])
    if not names:
        return {}
    known = {*_SETTABLE, *_READ_ONLY, "FifoQueue", "RedrivePolicy", "All"}
    unknown = sorted(names - known)
    if unknown:
        raise SqsError("InvalidAttributeName", f"Unknown Attribute {unknown[0]}.")
    row = await sync_to_async(_queue_row)(queue.id)
    settings = queue_settings(queue)
    values = {
        "QueueArn": ctx.arn(queue.name),
        "VisibilityTimeout": str(queue.visibility_timeout_ms // 1000),
        "DelaySeconds": str(row["delivery_delay_ms"] // 1000),
        "MaximumMessageSize": str(queue.max_message_bytes),
        "MessageRetentionPeriod": str(row["retention_ms"] // 1000),
        "ReceiveMessageWaitTimeSeconds": str(settings.get("receive_wait_seconds", 0)),
        "CreatedTimestamp": str(int(row["created"].timestamp())),
        "LastModifiedTimestamp": str(int(row["updated"].timestamp())),
        "SqsManagedSseEnabled": "false",
    }
    if row["dead_letter_queue__name"]:
        values["RedrivePolicy"] = json.dumps({"deadLetterTargetArn": ctx.arn(row["dead_letter_queue__name"]),
                                              "maxReceiveCount": row["max_deliveries"]})
    if "redrive_allow_policy" in settings:
        values["RedriveAllowPolicy"] = settings["redrive_allow_policy"]
    if queue.fifo:
        values.update(FifoQueue="true",
                      ContentBasedDeduplication="true" if settings.get("content_based_deduplication") else "false",
                      DeduplicationScope=settings.get("DeduplicationScope", "queue"),
                      FifoThroughputLimit=settings.get("FifoThroughputLimit", "perQueue"))
    if names & {"All", "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed"}:
        values.update(await counts(ctx, queue))
    wanted = values if "All" in names else {n: v for n, v in values.items() if n in names}
    return {"Attributes": wanted}


def _queue_row(queue_id: int) -> dict:
    from django.db import close_old_connections
    from tideway_server.topics.models import Queue

    close_old_connections()
    return Queue.objects.filter(pk=queue_id).values("created", "updated", "retention_ms", "delivery_delay_ms",
                                                    "max_deliveries", "dead_letter_queue__name").get()


async def set_queue_attributes(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "manage")
    values, sqs = _values(params.get("Attributes") or {}, fifo=queue.fifo, creating=False)
    if "redrive_policy" in sqs:
        values.update(await _redrive(ctx, sqs.pop("redrive_policy"), fifo=queue.fifo, name=queue.name))
    await sync_to_async(_update)(ctx, queue, values, sqs)
    return {}


def _update(ctx: Context, queue: QueueInfo, values: dict, sqs: dict | None = None, *, tags=None) -> None:
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.topics.actions import do_update_queue
    from tideway_server.topics.models import Queue

    row = Queue.objects.select_related("tenant", "cluster").get(pk=queue.id)
    settings = dict(row.sqs_settings or {})
    settings.update(sqs or {})
    if tags is not None:
        settings["tags"] = tags
    try:
        do_update_queue(row, {**values, "sqs_settings": settings}, acting=ctx.caller.principal.actor)
    except ActionError as exc:
        raise _action_error(exc) from None
    catalog.forget(queue.tenant_id, queue.name)


async def delete_queue(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "manage")
    await sync_to_async(_delete)(ctx, queue)
    catalog.forget(queue.tenant_id, queue.name)
    return {}


def _delete(ctx: Context, queue: QueueInfo) -> None:
    from tideway_server.controlplane.errors import ActionError
    from tideway_server.topics.actions import do_delete_queue
    from tideway_server.topics.models import Queue

    row = Queue.objects.select_related("tenant", "cluster").filter(pk=queue.id).first()
    if row is None:
        raise SqsError("QueueDoesNotExist", "The specified queue does not exist.")
    try:
        do_delete_queue(row, acting=ctx.caller.principal.actor)
    except ActionError as exc:
        raise _action_error(exc) from None


async def purge_queue(ctx: Context, params: dict) -> dict:
    from tideway_server.tenants import audit

    queue = await queue_of(ctx, params)
    purged = await operations.purge_queue(ctx.caller, queue)
    principal = ctx.caller.principal
    await sync_to_async(audit.record)(principal.tenant, principal.actor, "queue.purge", queue.name,
                                      purged=purged["purged"])
    return {}


def _tags(tags) -> dict[str, str]:
    if not isinstance(tags, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tags.items()):
        raise invalid("Tags must be a map of strings")
    if len(tags) > MAX_TAGS or any(not 1 <= len(k) <= 128 or len(v) > 256 for k, v in tags.items()):
        raise invalid(f"at most {MAX_TAGS} tags, keys of 1 to 128 characters, values of at most 256")
    return dict(tags)


async def tag_queue(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "manage")
    tags = {**queue_settings(queue).get("tags", {}), **_tags(params.get("Tags") or {})}
    await sync_to_async(_update)(ctx, queue, {}, tags=_tags(tags))
    return {}


async def untag_queue(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    operations.require_scope(ctx.caller, "manage")
    keys = params.get("TagKeys") or []
    tags = {k: v for k, v in queue_settings(queue).get("tags", {}).items() if k not in keys}
    await sync_to_async(_update)(ctx, queue, {}, tags=tags)
    return {}


async def list_queue_tags(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    tags = queue_settings(queue).get("tags", {})
    return {"Tags": tags} if tags else {}


async def list_dead_letter_source_queues(ctx: Context, params: dict) -> dict:
    queue = await queue_of(ctx, params)
    limit = integer(params, "MaxResults", 1, 1000)
    names = await sync_to_async(_sources)(queue.id)
    names = [n for n in names if ctx.caller.may_touch(n)]
    after = str(params.get("NextToken") or "")
    if after:
        try:
            after = base64.urlsafe_b64decode(after.encode()).decode()
        except (ValueError, binascii.Error, UnicodeDecodeError):
            raise invalid("Invalid NextToken value.") from None
        names = [n for n in names if n > after]
    page = names[:limit or 1000]
    answer: dict = {"queueUrls": [ctx.queue_url(n) for n in page]}
    if limit and len(names) > limit:
        answer["NextToken"] = base64.urlsafe_b64encode(page[-1].encode()).decode()
    return answer


def _sources(queue_id: int) -> list[str]:
    from django.db import close_old_connections
    from tideway_server.topics.models import Queue

    close_old_connections()
    return list(Queue.objects.filter(dead_letter_queue_id=queue_id).order_by("name").values_list("name", flat=True))
