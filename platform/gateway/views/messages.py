"""Publish a batch, peek at a queue's messages without consuming them, and purge them all."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from tideway_server.gateway import operations
from tideway_server.gateway.publishing import publish
from tideway_server.gateway.views.base import GatewayView, int_param, json_response
from tideway_server.gateway.wire import PublishBody, decode


class MessagesView(GatewayView):
    """POST: publish up to 1,000 messages. GET: peek (read without consuming or locking)."""

    required_scopes = {"POST": "produce", "GET": "consume"}
    rate_limited_by_handler = frozenset({"POST"})
    consuming_methods = frozenset({"GET"})

    async def post(self, request, call, name):
        body = decode(request.body, PublishBody)
        results = await publish(call.caller, call.queue, body.messages)
        return json_response({"messages": results})

    async def get(self, request, call, name):
        queue = call.queue
        messages = await operations.peek(
            call.caller, queue, max_messages=int_param(request, "max_messages", 10, low=1, high=1000),
            partition=int_param(request, "partition", None, low=0, high=queue.partitions - 1),
            offset=int_param(request, "offset", None, low=0), base64_always=request.GET.get("encoding") == "base64")
        return json_response({"messages": messages})


class PurgeView(GatewayView):
    """POST: delete every message the queue holds now (irreversible); what is published meanwhile stays."""

    required_scopes = {"POST": "manage"}

    async def post(self, request, call, name):
        from tideway_server.tenants import audit

        purged = await operations.purge_queue(call.caller, call.queue)
        principal = call.caller.principal
        await sync_to_async(audit.record)(principal.tenant, principal.actor, "queue.purge", name, purged=purged["purged"])
        return json_response(purged)
