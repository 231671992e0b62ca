"""Publish a batch, publish to several queues all or nothing, peek at a queue's messages without consuming them,
and purge them all."""

from __future__ import annotations

from asgiref.sync import sync_to_async
from tideway_server.gateway import operations
from tideway_server.gateway.catalog import queue_named
from tideway_server.gateway.errors import GatewayError, queue_not_found
from tideway_server.gateway.metering import meter
from tideway_server.gateway.publishing import publish, publish_atomically
from tideway_server.gateway.views.base import GatewayView, int_param, json_response
from tideway_server.gateway.wire import AtomicPublishBody, PublishBody, decode


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


class AtomicPublishView(GatewayView):
    """POST: publish to several queues of the tenant in one transaction: all the messages, or none."""

    required_scopes = {"POST": "produce"}
    rate_limited_by_handler = frozenset({"POST"})
    queue_required = False

    async def post(self, request, call, name=None):
        body = decode(request.body, AtomicPublishBody)
        batches = []
        for entry in body.queues:
            if not call.caller.may_touch(entry.queue):
                raise GatewayError("forbidden", f"this API key may not use queue {entry.queue!r} (its queue patterns "
                                   "do not match)")
            queue = await queue_named(call.caller.tenant_id, entry.queue)
            if queue is None:
                raise queue_not_found(entry.queue)
            batches.append((queue, entry.messages))
        # The request is metered to its queues (the dispatcher meters a queue-less call to none): the first
        # counts the request, each the share of the body its messages are.
        sizes = [sum(len(m.value or m.value_base64 or "") + len(m.key or m.key_base64 or "") for m in messages) or 1
                 for _queue, messages in batches]
        for index, (queue, _messages) in enumerate(batches):
            meter.count(queue, requests=int(index == 0), bytes_in=len(request.body) * sizes[index] // sum(sizes))
        results = await publish_atomically(call.caller, batches)
        return json_response({"queues": [{"queue": queue.name, "messages": found}
                                         for (queue, _messages), found in zip(batches, results, strict=True)]})


class PurgeView(GatewayView):
    """POST: delete every message the queue holds now (irreversible); what is published meanwhile stays."""

    required_scopes = {"POST": "manage"}

    async def post(self, request, call, name):
        from tideway_server.tenants import audit

        purged = await operations.purge_queue(call.caller, call.queue)
        principal = call.caller.principal
        await sync_to_async(audit.record)(principal.tenant, principal.actor, "queue.purge", name, purged=purged["purged"])
        return json_response(purged)
