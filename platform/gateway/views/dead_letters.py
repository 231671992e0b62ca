"""Dead letters of a queue: list, purge, and redrive (a Celery job, at a rate)."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from tideway_server.gateway import limits, operations
from tideway_server.gateway.errors import GatewayError
from tideway_server.gateway.views.base import GatewayView, int_param, json_response
from tideway_server.gateway.wire import RedriveBody, decode


class DeadLettersView(GatewayView):
    """GET: dead letters not redriven yet, oldest first. DELETE: purge them all."""

    required_scopes = {"GET": "consume", "DELETE": "manage"}
    consuming_methods = frozenset({"GET"})

    async def get(self, request, call, name):
        limit = int_param(request, "limit", 100, low=1, high=1000)
        letters = await operations.dead_letters(call.caller, call.queue, limit=limit,
                                                base64_always=request.GET.get("encoding") == "base64")
        return json_response({"messages": letters})

    async def delete(self, request, call, name):
        return json_response({"purged": await operations.purge(call.caller, call.queue)})


class RedriveView(GatewayView):
    """POST {"rate_per_s": 100, "limit": null, "messages": null}: start moving dead letters back (202 with a job id).

    All of them (the oldest ``limit``), or the ``messages`` selected by partition and offset.
    """

    required_scopes = {"POST": "manage"}

    async def post(self, request, call, name):
        body = decode(request.body, RedriveBody)
        selected = None if body.messages is None else [(m.partition, m.offset) for m in body.messages]
        job_id = await operations.start_redrive(call.caller, call.queue, rate_per_s=body.rate_per_s, limit=body.limit,
                                                selected=selected)
        return json_response({"job_id": job_id, "state": "PENDING",
                              "status_url": f"/api/v1/queues/{name}/dead-letters/redrives/{job_id}"}, status=202)


class RedriveJobView(GatewayView):
    """GET: the state of a redrive job (PENDING, STARTED, SUCCESS, FAILURE) and how many it moved."""

    required_scopes = {"GET": "consume"}

    async def get(self, request, call, name, job_id):
        if not await limits.connection().exists(operations.redrive_job_key(call.queue.id, job_id)):
            raise GatewayError("not_found", f"redrive job {job_id!r} does not exist")
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
