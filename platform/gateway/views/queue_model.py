"""The queue model over REST: receive (long polling), ack, nack, reject and extend, by receipt (gateway.operations)."""

from __future__ import annotations

from tideway_server.gateway import operations
from tideway_server.gateway.pool import REST_ACK_LINGER_MS
from tideway_server.gateway.views.base import GatewayView, json_response
from tideway_server.gateway.wire import ReceiptsBody, ReceiveBody, decode


class ReceiveView(GatewayView):
    required_scopes = {"POST": "consume"}
    consuming_methods = frozenset({"POST"})

    async def post(self, request, call, name, group):
        body = decode(request.body, ReceiveBody)
        messages = await operations.receive(call.caller, call.queue, group, max_messages=body.max_messages,
                                            wait_seconds=body.wait_seconds, visibility_timeout=body.visibility_timeout)
        base64_always = request.GET.get("encoding") == "base64"
        return json_response({"messages": [operations.delivery_json(m, base64_always) for m in messages]})


class SettleView(GatewayView):
    """``.../ack`` (done), ``.../nack`` (redeliver; dead-lettered at max deliveries), ``.../reject`` (dead-letter
    now) and ``.../extend`` (the visibility timeout moves), by receipt; ``action`` says which."""

    required_scopes = {"POST": "consume"}
    action = "ack"

    async def post(self, request, call, name, group):
        body = decode(request.body, ReceiptsBody)
        consumer = await operations.queue_consumer(call.caller, call.queue, group)
        # The client waits for this answer: its ack lingers less than a WebSocket subscriber's.
        outcome = await operations.settlement(consumer, self.action, body, ack_linger_ms=REST_ACK_LINGER_MS)
        if self.action == "extend":
            return json_response({"receipts": [{"receipt": r, "visible_at": d} for r, d in zip(body.receipts, outcome, strict=True)]})
        return json_response({operations.SETTLED[self.action]: len(body.receipts)})
