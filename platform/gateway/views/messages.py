"""Publish a batch, and peek at a queue's messages without consuming them."""

from __future__ import annotations

from brokers.protocol.messages import EARLIEST_TIMESTAMP
from gateway import limits, pool
from gateway.publishing import publish
from gateway.views.base import GatewayView, int_param, json_response
from gateway.wire import PublishBody, decode, message_json


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
        max_messages = int_param(request, "max_messages", 10, low=1, high=1000)
        only = int_param(request, "partition", None, low=0, high=queue.partitions - 1)
        start = int_param(request, "offset", None, low=0)
        base64_always = request.GET.get("encoding") == "base64"
        out, consumed = [], 0
        broker_client = await pool.client(queue.bootstrap)
        for partition in [only] if only is not None else range(queue.partitions):
            if len(out) >= max_messages:
                break
            offset = start
            if offset is None:
                offset, _ = await broker_client.list_offset(queue.broker_topic, partition, EARLIEST_TIMESTAMP)
            records, _next, _hw = await pool.read_partition(queue.bootstrap, queue.broker_topic, partition, offset,
                                                            max_records=max_messages - len(out), wait_ms=0)
            out += [message_json(partition=partition, offset=r.offset, timestamp_ms=r.timestamp_ms, key=r.key, value=r.value,
                                 headers=r.headers, base64_always=base64_always) for r in records]
            consumed += sum(len(r.value or b"") + len(r.key or b"") for r in records)
        await limits.charge_consumed(call.caller, consumed)
        return json_response({"messages": out})
