"""Dead letters of a queue: list, purge, and redrive (a Celery job, at a rate)."""

from __future__ import annotations

import uuid

from asgiref.sync import sync_to_async

from brokers.client.queue import list_dead_letters, purge_dead_letters
from gateway import limits, pool
from gateway.errors import GatewayError, invalid
from gateway.views.base import GatewayView, int_param, json_response, require_queue_mode
from gateway.wire import RedriveBody, decode, message_json

JOB_MEMORY_S = 24 * 3600


class DeadLettersView(GatewayView):
    """GET: dead letters not redriven yet, oldest first. DELETE: purge them all."""

    required_scopes = {"GET": "consume", "DELETE": "manage"}
    consuming_methods = frozenset({"GET"})

    async def get(self, request, call, name):
        require_queue_mode(call)
        limit = int_param(request, "limit", 100, low=1, high=1000)
        letters = await list_dead_letters(await pool.client(call.queue.bootstrap), call.queue.dead_letter_topic, limit=limit)
        base64_always = request.GET.get("encoding") == "base64"
        return json_response({"messages": [
            message_json(partition=d["partition"], offset=d["offset"], timestamp_ms=d["timestamp_ms"], key=d["key"], value=d["value"],
                         headers=[(k, v.encode()) for k, v in d["headers"].items()], base64_always=base64_always)
            for d in letters]})

    async def delete(self, request, call, name):
        require_queue_mode(call)
        purged = await purge_dead_letters(await pool.client(call.queue.bootstrap), call.queue.dead_letter_topic)
        return json_response({"purged": purged})


def _job_key(queue_id: int, job_id: str) -> str:
    return f"tw:redrive:{queue_id}:{job_id}"


class RedriveView(GatewayView):
    """POST {"rate_per_s": 100, "limit": null, "messages": null}: start moving dead letters back (202 with a job id).

    All of them (the oldest ``limit``), or the ``messages`` selected by partition and offset.
    """

    required_scopes = {"POST": "manage"}

    async def post(self, request, call, name):
        require_queue_mode(call)
        body = decode(request.body, RedriveBody)
        if not 0 < body.rate_per_s <= 100_000:
            raise invalid("rate_per_s must be more than 0 and at most 100000")
        if body.limit is not None and body.limit < 1:
            raise invalid("limit must be 1 or more (or null for all)")
        if body.messages is not None and not 0 < len(body.messages) <= 1000:
            raise invalid("messages selects 1 to 1000 dead letters (or leave it out for all)")
        for letter in body.messages or ():
            # The dead-letter topic has as many partitions as the queue.
            if letter.partition >= call.queue.partitions:
                raise invalid(f"dead letters are in partitions 0..{call.queue.partitions - 1}; there is no partition "
                              f"{letter.partition}", partition=letter.partition)
        selected = None if body.messages is None else [[m.partition, m.offset] for m in body.messages]
        from gateway.tasks import redrive_dead_letters

        job_id = uuid.uuid4().hex
        await limits.connection().set(_job_key(call.queue.id, job_id), 1, ex=JOB_MEMORY_S)
        await sync_to_async(redrive_dead_letters.apply_async)((call.queue.id, body.rate_per_s, body.limit, selected), task_id=job_id)
        return json_response({"job_id": job_id, "state": "PENDING",
                              "status_url": f"/api/v1/queues/{name}/dead-letters/redrives/{job_id}"}, status=202)


class RedriveJobView(GatewayView):
    """GET: the state of a redrive job (PENDING, STARTED, SUCCESS, FAILURE) and how many it moved."""

    required_scopes = {"GET": "consume"}

    async def get(self, request, call, name, job_id):
        if not await limits.connection().exists(_job_key(call.queue.id, job_id)):
            raise GatewayError("not_found", f"redrive job {job_id!r} does not exist", 404)
        from celery.result import AsyncResult

        def state() -> dict:
            result = AsyncResult(job_id)
            answer = {"job_id": job_id, "state": result.state}
            if result.successful():
                answer["moved"] = result.result["moved"]
            elif result.failed():
                answer["error"] = str(result.result)
            return answer

        return json_response(await sync_to_async(state)())
