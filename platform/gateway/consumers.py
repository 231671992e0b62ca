"""The WebSocket endpoint ``/ws/v1/queues/{name}``: publish and subscribe on one connection.

Frames are JSON text. From the client::

    {"type": "subscribe", "group": "workers", "prefetch": 10, "visibility_timeout": 30}
    {"type": "ack", "receipts": ["0:17:1"], "id": 7}
    {"type": "nack", "receipts": [...], "delay_seconds": 5}     (also "reject", "extend" with "seconds")
    {"type": "publish", "id": 8, "messages": [{"value": "hello"}]}
    {"type": "ping", "id": 9}

From the server: ``ready``, ``messages`` (a list of deliveries with receipts),
``acked`` / ``nacked`` / ``rejected`` / ``extended``, ``published``, ``pong``,
``throttle`` (with ``retry_after_ms``) and ``error`` (the API's error shape);
answers echo the request's ``id``.

Flow control is by credit: at most ``prefetch`` delivered messages are
unacknowledged at any time, so a slow client never makes the server hold
more than that. When the connection closes, its unacknowledged messages are
released for redelivery at once. The subscribers of one group share its
receives (``gateway.feeds``): an idle subscriber costs the brokers nothing,
and messages are shared out in turn among the subscribers with credit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from urllib.parse import parse_qs

import msgspec
from channels.exceptions import StopConsumer
from channels.generic.websocket import AsyncWebsocketConsumer
from tideway_server.gateway.auth import Caller, authenticate
from tideway_server.gateway.catalog import QueueInfo, queue_named
from tideway_server.gateway.errors import GatewayError, invalid, queue_not_found
from tideway_server.gateway.feeds import LONG_POLL_MS, Feed, feed_for
from tideway_server.gateway.metering import meter
from tideway_server.gateway.operations import (
    broker_failure,
    check_lock_seconds,
    delivery_json,
    queue_consumer,
    require_queue_mode,
    require_scope,
    settlement,
)
from tideway_server.gateway.publishing import start_publish
from tideway_server.gateway.wire import ENCODER, OutgoingMessage

from tideway.protocol import errors as broker_errors

log = logging.getLogger(__name__)

PREFETCH_MAX = 1000
IN_FLIGHT_MAX = 64  # publishes and acks one connection may have waiting for the brokers


class Frame(msgspec.Struct, forbid_unknown_fields=True):
    type: str
    id: int | str | None = None
    group: str | None = None
    prefetch: int = 10
    visibility_timeout: float | None = None
    receipts: list[str] = []
    delay_seconds: float | None = None
    seconds: float | None = None
    error: str = ""
    messages: list[OutgoingMessage] = []
    encoding: str = "text"


_decode_frame = msgspec.json.Decoder(Frame).decode


class QueueSocket(AsyncWebsocketConsumer):
    caller: Caller
    queue: QueueInfo

    async def connect(self) -> None:
        await self.accept()
        name = self.scope["url_route"]["kwargs"]["name"]
        headers = dict(self.scope.get("headers", []))
        query = parse_qs(self.scope.get("query_string", b"").decode())
        self.feed: Feed | None = None
        self.unacked: dict[str, int] = {}  # receipt -> lock deadline (ms)
        self.first_deadline = float("inf")  # no lock in ``unacked`` ends before this
        self.closing = False
        self.consumer = None
        self.background: set[asyncio.Task] = set()  # publishes and acks waiting for the brokers
        try:
            self.caller = await authenticate(headers.get(b"authorization", b"").decode(), (query.get("token") or [""])[0])
            if not self.caller.may_touch(name):
                raise GatewayError("forbidden", f"this API key may not use queue {name!r}")
            queue = await queue_named(self.caller.tenant_id, name)
            if queue is None:
                raise queue_not_found(name)
            self.queue = queue
        except GatewayError as exc:
            await self.send_json({"type": "error", **exc.body()})
            # Close codes 4000-4999 are the application's: 4401, 4403, 4404 (the HTTP status + 4000).
            await self.close(code=4000 + exc.status if exc.status in (401, 403, 404) else 4400)
            return
        await self.send_json({"type": "ready", "queue": name, "mode": self.queue.mode, "prefetch_max": PREFETCH_MAX})

    async def __call__(self, scope, receive, send) -> None:
        """Channels' consumer loop without its channel-layer half.

        ``AsyncConsumer.__call__`` listens to the client and to a channel layer at once, with a new
        task and an ``asyncio.wait`` for every frame (``await_many_dispatch``). These sockets use no
        channel layer (a group's subscribers share a feed in this process), so one plain loop reads
        and dispatches the frames.
        """
        self.scope = scope
        self.channel_layer = None
        self.base_send = send
        try:
            while True:
                await self.dispatch(await receive())
        except StopConsumer:
            pass

    async def dispatch(self, message) -> None:
        # Frames skip Channels' close_old_connections() before each message (a hop to a thread
        # and back): handling a frame touches no database (keys, queues and schemas come from
        # short caches, which look after their own connections).
        if message["type"] == "websocket.receive":
            await self.websocket_receive(message)
        else:
            await super().dispatch(message)

    async def send_json(self, body: dict) -> None:
        text = ENCODER.encode(body).decode()
        meter.count(getattr(self, "queue", None), requests=0, bytes_out=_utf8_length(text))
        await self.base_send({"type": "websocket.send", "text": text})

    async def receive(self, text_data=None, bytes_data=None) -> None:
        frame_id = None
        try:
            if not hasattr(self, "queue"):
                return
            meter.count(self.queue, bytes_in=_utf8_length(text_data) if text_data is not None else len(bytes_data or b""))
            try:
                frame = _decode_frame(text_data if text_data is not None else bytes_data)
            except msgspec.ValidationError as exc:
                raise invalid(f"the frame is not valid: {exc}") from None
            except msgspec.DecodeError as exc:
                raise GatewayError("malformed_request", f"the frame is not JSON: {exc}") from None
            frame_id = frame.id
            handler = _HANDLERS.get(frame.type)
            if handler is None:
                raise invalid(f"unknown frame type {frame.type!r} (subscribe, ack, nack, reject, extend, publish, ping)")
            await handler(self, frame)
        except GatewayError as exc:
            if exc.code == "throttled":
                await self.send_json({"type": "throttle", "id": frame_id, "retry_after_ms": exc.retry_after_ms, **exc.body()})
            else:
                await self.send_json({"type": "error", "id": frame_id, **exc.body()})
        except broker_errors.TidewayError as exc:
            await self.send_json({"type": "error", "id": frame_id, **broker_failure(exc).body()})

    def _need(self, scope: str) -> None:
        require_scope(self.caller, scope)

    # -- frames ------------------------------------------------------------------------------

    async def on_ping(self, frame: Frame) -> None:
        await self.send_json({"type": "pong", "id": frame.id})

    async def on_publish(self, frame: Frame) -> None:
        """Send now, in frame order; answer when acknowledged, without holding up the next frames."""
        self._need("produce")
        acknowledged = await start_publish(self.caller, self.queue, frame.messages)
        await self._in_background(self._answer_publish(frame.id, acknowledged))

    async def _answer_publish(self, frame_id, acknowledged) -> None:
        try:
            await self.send_json({"type": "published", "id": frame_id, "messages": await acknowledged})
        except GatewayError as exc:
            await self.send_json({"type": "error", "id": frame_id, **exc.body()})
        except Exception as exc:  # the socket closed meanwhile: nothing to answer
            log.info("websocket on %s: publish answer not sent: %s", self.queue.broker_topic, exc)

    async def on_subscribe(self, frame: Frame) -> None:
        self._need("consume")
        if self.feed is not None:
            raise invalid("this connection is already subscribed")
        require_queue_mode(self.queue)
        if not 1 <= frame.prefetch <= PREFETCH_MAX:
            raise invalid(f"prefetch must be 1 to {PREFETCH_MAX}")
        check_lock_seconds(frame.visibility_timeout)
        self.consumer = await queue_consumer(self.caller, self.queue, frame.group or "default")
        self.prefetch = frame.prefetch
        self.lock_ms = int(frame.visibility_timeout * 1000) if frame.visibility_timeout else 0
        self.base64_always = frame.encoding == "base64"
        await self.send_json({"type": "subscribed", "id": frame.id, "group": frame.group or "default", "prefetch": self.prefetch})
        self.feed = feed_for((self.queue.bootstrap, self.consumer.group_id, self.queue.broker_topic, self.lock_ms),
                             self.consumer, self.lock_ms)
        self.feed.join(self)

    async def _settle(self, frame: Frame, action: str) -> None:
        self._need("consume")
        if self.consumer is None:
            raise invalid("subscribe before acknowledging")
        settled = settlement(self.consumer, action, frame)
        receipts = frame.receipts
        answer: dict = {"type": _ANSWERS[action], "id": frame.id, "receipts": receipts}
        if action == "extend":
            deadlines = await settled
            for receipt, deadline in zip(receipts, deadlines, strict=True):
                if receipt in self.unacked:
                    self.unacked[receipt] = deadline
                    self.first_deadline = min(self.first_deadline, deadline)
            answer["visible_at"] = deadlines
            await self.send_json(answer)
            return
        # The client is done with these: their credit is free now, while the brokers record it
        # (if that fails, the brokers deliver them again, as for an expired lock).
        for receipt in receipts:
            self.unacked.pop(receipt, None)
        if self.feed is not None:
            self.feed.wake()
        await self._in_background(self._answer_when_done(frame.id, settled, answer))

    async def _answer_when_done(self, frame_id, settled, answer: dict) -> None:
        try:
            await settled
        except broker_errors.TidewayError as exc:
            answer = {"type": "error", "id": frame_id, **broker_failure(exc).body()}
        try:
            await self.send_json(answer)
        except Exception as exc:  # the socket closed meanwhile: nothing to answer
            log.info("websocket on %s: answer not sent: %s", self.queue.broker_topic, exc)

    async def _in_background(self, coroutine) -> None:
        """Run ``coroutine`` without holding up the next frames; at most IN_FLIGHT_MAX at a time."""
        while len(self.background) >= IN_FLIGHT_MAX:
            await asyncio.wait(self.background, return_when=asyncio.FIRST_COMPLETED)
        task = asyncio.get_running_loop().create_task(coroutine)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def on_ack(self, frame: Frame) -> None:
        await self._settle(frame, "ack")

    async def on_nack(self, frame: Frame) -> None:
        await self._settle(frame, "nack")

    async def on_reject(self, frame: Frame) -> None:
        await self._settle(frame, "reject")

    async def on_extend(self, frame: Frame) -> None:
        await self._settle(frame, "extend")

    # -- pushing -----------------------------------------------------------------------------

    def room(self) -> int:
        """Messages this subscriber may take now (the feed asks)."""
        if self.closing:
            return 0
        now_ms = time.time() * 1000
        if now_ms >= self.first_deadline:
            expired = [r for r, deadline in self.unacked.items() if deadline <= now_ms]
            for receipt in expired:  # the lock passed: the message is someone else's now
                del self.unacked[receipt]
            self.first_deadline = min(self.unacked.values(), default=float("inf"))
        return self.prefetch - len(self.unacked)

    async def deliver(self, messages) -> bool:
        """Push ``messages`` (the feed's share for this socket); False if the socket is gone."""
        if self.closing:
            return False
        for message in messages:  # held before the frame goes: an ack may come right after it
            self.unacked[message.receipt] = message.lock_deadline_ms
        self.first_deadline = min(self.first_deadline, min(m.lock_deadline_ms for m in messages))
        try:
            await self.send_json({"type": "messages", "messages": [delivery_json(m, self.base64_always) for m in messages]})
        except Exception as exc:  # the client went away
            log.info("websocket on %s: push failed (%s); the connection is closing", self.queue.broker_topic, exc)
            self.closing = True
        if self.closing:  # gone, or it disconnected meanwhile (releasing what it held before these): the feed takes them back
            for message in messages:
                self.unacked.pop(message.receipt, None)
            return False
        return True

    async def throttled(self, exc: GatewayError) -> None:
        await self.send_json({"type": "throttle", "retry_after_ms": exc.retry_after_ms, **exc.body()})

    async def disconnect(self, code) -> None:
        self.closing = True
        feed = getattr(self, "feed", None)
        if feed is not None:
            feed.leave(self)  # from now on it gives this socket nothing
            if not feed.subscribers and self.unacked:
                await feed.receives_back(LONG_POLL_MS / 1000 + 5)
        if getattr(self, "unacked", None) and self.consumer is not None:
            receipts = list(self.unacked)
            self.unacked.clear()
            try:
                await self.consumer.nack(receipts, delay_ms=0, error="the WebSocket consumer disconnected")
            except broker_errors.TidewayError as exc:
                log.info("releasing %d messages after a disconnect: %s (they come back when their locks expire)", len(receipts), exc)


_ANSWERS = {"ack": "acked", "nack": "nacked", "reject": "rejected", "extend": "extended"}
_HANDLERS = {
    "ping": QueueSocket.on_ping,
    "publish": QueueSocket.on_publish,
    "subscribe": QueueSocket.on_subscribe,
    "ack": QueueSocket.on_ack,
    "nack": QueueSocket.on_nack,
    "reject": QueueSocket.on_reject,
    "extend": QueueSocket.on_extend,
}


def _utf8_length(text: str) -> int:
    """Bytes of ``text`` on the wire (JSON frames are nearly always ASCII: no encoding then)."""
    return len(text) if text.isascii() else len(text.encode())
