"""The queue model over REST: receive (long polling), ack, nack, reject and extend, by receipt."""

from __future__ import annotations

from brokers.client.queue import parse_receipt
from gateway import limits, pool
from gateway.errors import invalid
from gateway.views.base import Call, GatewayView, broker_group, json_response, require_queue_mode
from gateway.wire import ReceiptsBody, ReceiveBody, add_body, decode

MAX_WAIT_SECONDS = 20
MAX_RECEIVE = 1000
MAX_LOCK_SECONDS = 12 * 3600
MIN_LOCK_SECONDS = 0.001  # locks are kept in whole milliseconds


def delivery_json(message, base64_always: bool = False) -> dict:
    """A delivery as the API shows it (``message_json`` plus receipt, delivery count and lock deadline)."""
    out: dict = {"partition": message.partition, "offset": message.offset, "timestamp": message.timestamp_ms}
    add_body(out, message.key, message.value, message.headers, base64_always)
    out["receipt"] = message.receipt
    out["delivery_count"] = message.delivery_count
    out["visible_at"] = message.lock_deadline_ms
    return out


async def consumer_for(call: Call, group: str):
    require_queue_mode(call)
    return await pool.queue_consumer(call.queue.bootstrap, broker_group(call, group, "q"), call.queue.broker_topic)


def checked_receipts(receipts: list[str]) -> list[tuple[int, int, int]]:
    """The receipts, parsed (the broker client takes them so)."""
    if not receipts:
        raise invalid("receipts is empty")
    if len(receipts) > MAX_RECEIVE:
        raise invalid(f"at most {MAX_RECEIVE} receipts per call")
    try:
        return [parse_receipt(receipt) for receipt in receipts]
    except Exception:
        bad = next(r for r in receipts if not _parses(r))
        raise invalid(f"receipt {bad!r} is not one this queue gave (partition:offset:delivery)") from None


def _parses(receipt: str) -> bool:
    try:
        parse_receipt(receipt)
    except Exception:
        return False
    return True


async def receive(call: Call, group: str, *, max_messages: int, wait_seconds: float, visibility_timeout: float | None):
    if not 1 <= max_messages <= MAX_RECEIVE:
        raise invalid(f"max_messages must be 1 to {MAX_RECEIVE}")
    if not 0 <= wait_seconds <= MAX_WAIT_SECONDS:
        raise invalid(f"wait_seconds must be 0 to {MAX_WAIT_SECONDS}")
    if visibility_timeout is not None and not MIN_LOCK_SECONDS <= visibility_timeout <= MAX_LOCK_SECONDS:
        raise invalid(f"visibility_timeout must be {MIN_LOCK_SECONDS} (1 ms) to {MAX_LOCK_SECONDS} seconds")
    consumer = await consumer_for(call, group)
    lock_ms = int(visibility_timeout * 1000) if visibility_timeout is not None else 0
    messages = await consumer.receive(max_messages, wait_ms=int(wait_seconds * 1000), lock_ms=lock_ms)
    await limits.charge_consumed(call.caller, sum(len(m.value or b"") + len(m.key or b"") for m in messages))
    return messages


class ReceiveView(GatewayView):
    required_scopes = {"POST": "consume"}
    consuming_methods = frozenset({"POST"})

    async def post(self, request, call, name, group):
        body = decode(request.body, ReceiveBody)
        messages = await receive(call, group, max_messages=body.max_messages, wait_seconds=body.wait_seconds,
                                 visibility_timeout=body.visibility_timeout)
        base64_always = request.GET.get("encoding") == "base64"
        return json_response({"messages": [delivery_json(m, base64_always) for m in messages]})


# What a settled call answers over REST: {"acked": 3}, {"released": 3}, {"rejected": 3}.
_SETTLED = {"ack": "acked", "nack": "released", "reject": "rejected"}


def settlement(consumer, action: str, request):
    """Check an ack, nack, reject or extend and return the brokers' call for it (not yet awaited).

    ``request`` is a REST body or a WebSocket frame: ``receipts``, and ``delay_seconds`` (nack: redeliver
    after this long, default the queue's backoff), ``seconds`` (extend: hold the locks this much longer
    from now) and ``error`` (nack and reject: kept in the dead-letter headers).
    """
    receipts = checked_receipts(request.receipts)
    if action == "ack":
        return consumer.ack(receipts)
    if action == "nack":
        if request.delay_seconds is not None and not 0 <= request.delay_seconds <= MAX_LOCK_SECONDS:
            raise invalid(f"delay_seconds must be 0 to {MAX_LOCK_SECONDS}")
        delay_ms = None if request.delay_seconds is None else int(request.delay_seconds * 1000)
        return consumer.nack(receipts, delay_ms=delay_ms, error=request.error)
    if action == "reject":
        return consumer.reject(receipts, error=request.error)
    if request.seconds is None or not MIN_LOCK_SECONDS <= request.seconds <= MAX_LOCK_SECONDS:
        raise invalid(f"seconds must be {MIN_LOCK_SECONDS} (1 ms) to {MAX_LOCK_SECONDS}")
    return consumer.extend(receipts, int(request.seconds * 1000))


class SettleView(GatewayView):
    """``.../ack`` (done), ``.../nack`` (redeliver; dead-lettered at max deliveries), ``.../reject`` (dead-letter
    now) and ``.../extend`` (the visibility timeout moves), by receipt; ``action`` says which."""

    required_scopes = {"POST": "consume"}
    action = "ack"

    async def post(self, request, call, name, group):
        body = decode(request.body, ReceiptsBody)
        outcome = await settlement(await consumer_for(call, group), self.action, body)
        if self.action == "extend":
            return json_response({"receipts": [{"receipt": r, "visible_at": d} for r, d in zip(body.receipts, outcome, strict=True)]})
        return json_response({_SETTLED[self.action]: len(body.receipts)})
