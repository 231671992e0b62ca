"""SQS's message move tasks (dead-letter redrive): StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask.

A task moves the messages of a dead-letter queue (a queue that some queue's RedrivePolicy names) back to where
each came from, or to ``DestinationArn``: a Celery job (gateway/tasks.py ``sqs_move_messages``) receives them
through the dead-letter queue's group ``sqs``, publishes each (acks=all) and only then deletes it, at most
``MaxNumberOfMessagesPerSecond``. A task that dies half way has moved some and left the rest (a message may be
published twice, never lost). Its state lives in Redis for a day: one task at a time per source queue.
"""

from __future__ import annotations

import time
import uuid

from asgiref.sync import sync_to_async
from tideway_server.gateway import catalog, limits, operations
from tideway_server.gateway.sqs.common import Context, integer, required
from tideway_server.gateway.sqs.counts import counts
from tideway_server.gateway.sqs.protocol import SqsError, invalid

KEPT_S = 24 * 3600
MAX_RATE = 500


def state_key(source_queue_id: int, handle: str) -> str:
    return f"tw:sqsmove:{source_queue_id}:{handle}"


def _index_key(source_queue_id: int) -> str:
    return f"tw:sqsmoves:{source_queue_id}"


async def _queue_by_arn(ctx: Context, arn: str, what: str):
    parts = arn.split(":")
    name = parts[5] if len(parts) == 6 and parts[:3] == ["arn", "aws", "sqs"] and parts[4] == ctx.account else None
    queue = await catalog.queue_named(ctx.caller.tenant_id, name) if name and ctx.caller.may_touch(name) else None
    if queue is None or not queue.is_queue:
        raise SqsError("ResourceNotFoundException", f"The resource that you specified for the {what} parameter "
                       "doesn't exist.")
    return queue


async def start_message_move_task(ctx: Context, params: dict) -> dict:
    operations.require_scope(ctx.caller, "consume")
    operations.require_scope(ctx.caller, "produce")
    source = await _queue_by_arn(ctx, required(params, "SourceArn"), "SourceArn")
    destination = None
    if params.get("DestinationArn"):
        destination = await _queue_by_arn(ctx, str(params["DestinationArn"]), "DestinationArn")
    rate = integer(params, "MaxNumberOfMessagesPerSecond", 1, MAX_RATE, default=MAX_RATE)
    if not await sync_to_async(_is_dead_letter_queue)(source.id):
        raise invalid("Source queue must be configured as a Dead Letter Queue.")
    db = limits.connection()
    for handle in await db.smembers(_index_key(source.id)):
        state = await db.hgetall(state_key(source.id, handle.decode()))
        if state and state[b"status"] in (b"RUNNING", b"CANCELLING"):
            raise SqsError("UnsupportedOperation", "There is already a task running for this source queue. Only one "
                           "active task is allowed for each source queue ARN at a given time.")
    to_move = int((await counts(ctx, source))["ApproximateNumberOfMessages"])
    handle = uuid.uuid4().hex
    state = {"status": "RUNNING", "source_arn": ctx.arn(source.name),
             "destination_arn": ctx.arn(destination.name) if destination else "", "rate": rate, "moved": 0,
             "to_move": to_move, "started_ms": int(time.time() * 1000), "failure": ""}
    async with db.pipeline(transaction=True) as pipe:
        pipe.hset(state_key(source.id, handle), mapping=state)
        pipe.expire(state_key(source.id, handle), KEPT_S)
        pipe.sadd(_index_key(source.id), handle)
        pipe.expire(_index_key(source.id), KEPT_S)
        await pipe.execute()
    from tideway_server.gateway.tasks import sqs_move_messages

    await sync_to_async(sqs_move_messages.apply_async)(
        (source.id, destination.id if destination else None, rate, handle, ctx.caller.tenant_id), task_id=handle)
    return {"TaskHandle": _task_handle(source.id, handle)}


def _is_dead_letter_queue(queue_id: int) -> bool:
    from django.db import close_old_connections
    from tideway_server.topics.models import Queue

    close_old_connections()
    return Queue.objects.filter(dead_letter_queue_id=queue_id).exists()


def _task_handle(source_queue_id: int, handle: str) -> str:
    return f"{source_queue_id}.{handle}"


async def list_message_move_tasks(ctx: Context, params: dict) -> dict:
    source = await _queue_by_arn(ctx, required(params, "SourceArn"), "SourceArn")
    limit = integer(params, "MaxResults", 1, 10, default=1)
    db = limits.connection()
    tasks = []
    for handle in await db.smembers(_index_key(source.id)):
        state = {k.decode(): v.decode() for k, v in (await db.hgetall(state_key(source.id, handle.decode()))).items()}
        if state:
            tasks.append((handle.decode(), state))
    tasks.sort(key=lambda t: -int(t[1]["started_ms"]))
    results = []
    for handle, state in tasks[:limit]:
        entry = {"Status": state["status"], "SourceArn": state["source_arn"],
                 "MaxNumberOfMessagesPerSecond": int(state["rate"]),
                 "ApproximateNumberOfMessagesMoved": int(state["moved"]),
                 "ApproximateNumberOfMessagesToMove": int(state["to_move"]), "StartedTimestamp": int(state["started_ms"])}
        if state["status"] == "RUNNING":
            entry["TaskHandle"] = _task_handle(source.id, handle)
        if state["destination_arn"]:
            entry["DestinationArn"] = state["destination_arn"]
        if state["failure"]:
            entry["FailureReason"] = state["failure"]
        results.append(entry)
    return {"Results": results}


async def cancel_message_move_task(ctx: Context, params: dict) -> dict:
    operations.require_scope(ctx.caller, "consume")
    handle = required(params, "TaskHandle")
    source_id, _, task = handle.partition(".")
    db = limits.connection()
    state = await db.hgetall(state_key(int(source_id), task)) if source_id.isdigit() and task else {}
    source = await catalog.queue_named(ctx.caller.tenant_id, _name_of(state.get(b"source_arn", b"").decode()))
    if not state or source is None or source.id != int(source_id) or state[b"status"] != b"RUNNING":
        raise SqsError("ResourceNotFoundException", "The resource that you specified for the TaskHandle parameter "
                       "doesn't exist (or the task is not running).")
    await db.hset(state_key(source.id, task), "status", "CANCELLING")
    return {"ApproximateNumberOfMessagesMoved": int(state[b"moved"])}


def _name_of(arn: str) -> str:
    return arn.rsplit(":", 1)[-1] if arn else ""
