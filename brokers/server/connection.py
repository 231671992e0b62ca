"""One client connection to a server: frames in, handler tasks, frames out.

Requests on a connection are pipelined: each frame's handler runs at once, in
the callback that read it, up to its first wait (``aio.start_eagerly``), and
a task carries on the ones that wait; answers go out as they complete,
matched by correlation id. A large frame starts on the next loop turn, in a
task, and so does every frame after it until it has started. Handlers append
before their first ``await``, so produce requests on one connection are
appended in the order they were sent.

Everything is bounded (``limits.ConnectionLimits``): a connection is counted
before it may send anything; until it authenticates it may have few requests
in flight, in small frames, for a short time; after, at most
``in_flight_per_connection_max`` requests (reading pauses beyond it) and one
partial frame of at most ``frame_bytes_max``, checked from the length prefix
before the frame is buffered. A frame that does not arrive in one read is kept
only within the server's ``RequestBuffers`` (in all and per principal; held
until the request is handled) and, for a tenant, within
``tenant_request_bytes_max`` unless it is a produce; one that does not fit is
read past and answered with a typed error; one that takes longer than
``request_read_timeout_ms`` to arrive closes the connection. Reading also
pauses while the transport's write buffer is full.

The connection's ``Session`` says which listener it came in on and, once it
authenticated, who it acts as (``router`` and ``authorizer`` read it).

A connection in *ordered* mode (the Kafka listener: Kafka's frames have the
same length, api key, version and correlation id up front) writes its answers
in the order the requests came, holding an early answer until every one before
it is written; a request answered with nothing (a Kafka produce with acks=0)
holds no place. A frame refused for the buffers closes an ordered connection,
which has no protocol-neutral way to answer it.
"""

from __future__ import annotations

import asyncio
import collections
import enum
import logging
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from tideway_server.brokers.security.principal import Principal
from tideway_server.brokers.server.limits import ConnectionRegistry, RequestBuffers

from tideway.aio import start_eagerly
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.frames import (
    FrameDecoder,
    FrameError,
    KeptFrame,
    RefusedFrame,
    encode_response,
    split_request,
)

__all__ = ["BrokerConnection", "Listener", "Session"]

log = logging.getLogger(__name__)

# Larger requests start on the next loop turn, as tasks: run in the read callback, produce requests of
# 512 KiB lost 10% of their throughput (bench/broker.py, 1 KiB messages; not understood, measured),
# and their latency gains nothing from it.
EAGER_FRAME_BYTES_MAX = 64 << 10


class Listener(enum.Enum):
    CLIENT = "client"  # tenants' native clients, the gateway, the CLI
    INTERNAL = "internal"  # replication, controller RPCs, coordinator traffic: cluster peers only
    KAFKA = "kafka"  # unmodified Kafka clients and tools, in Kafka's wire protocol (brokers/kafka/)


@dataclass(eq=False)
class Session:
    """What a server knows about one connection."""

    listener: Listener
    peer: str = "?"
    principal: Principal | None = None
    nonce: bytes = b""  # the server's nonce of this connection's SASL handshake
    close_after_answer: bool = False  # set when authentication failed: answer, then hang up
    connection: BrokerConnection | None = field(default=None, repr=False)

    def authenticated(self, principal: Principal) -> bool:
        """Bind ``principal`` to this connection; False when a connection limit refuses it."""
        assert self.principal is None, "a connection authenticates once"
        if self.connection is not None and not self.connection.promote(principal):
            return False
        self.principal = principal
        return True


Dispatch = Callable[[Session, int, int, int, memoryview], Awaitable[bytes | None]]


_PRODUCE = int(m.ApiKey.PRODUCE)


class BrokerConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, *, listener: Listener, registry: ConnectionRegistry, on_close,
                 buffers: RequestBuffers | None = None, ordered: bool = False) -> None:
        self._dispatch = dispatch
        self._registry = registry
        limits = registry.limits
        self._limits = limits
        self._buffers = buffers  # None: frames are bounded by frame_bytes_max alone (the controller)
        self._decoder = FrameDecoder(frame_bytes_min=8, frame_bytes_max=limits.unauthenticated_frame_bytes_max,
                                     admit=self._admit)
        self._reservations: collections.deque[int] = collections.deque()  # bytes held for kept frames, in order
        self._refusals: collections.deque[errors.BrokerError] = collections.deque()  # why each refused frame was
        self._frames_read = 0
        self._read_deadline: asyncio.TimerHandle | None = None
        self._in_flight_max = limits.unauthenticated_in_flight_max
        self._in_flight = 0
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._muted: asyncio.TimerHandle | None = None  # a tenant over its rate: reading resumes then (mute)
        self._muted_until = 0.0  # ... and no request read starts before this (loop time)
        self._on_close = on_close
        self._tasks: set[asyncio.Task] = set()
        self._not_started = 0  # requests given to tasks that have not started yet (see data_received)
        self._admitted = False
        self._authentication_deadline: asyncio.TimerHandle | None = None
        self.session = Session(listener=listener, connection=self)
        # Ordered mode: [correlation id, answer, done] per request, oldest first (see the module's note).
        self._order: collections.deque[list] | None = collections.deque() if ordered else None

    @property
    def peer(self) -> str:
        return self.session.peer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.session.peer = str(transport.get_extra_info("peername"))
        if not self._registry.admit(self.session.peer):
            transport.abort()  # type: ignore[attr-defined]
            return
        self._admitted = True
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._authentication_deadline = asyncio.get_running_loop().call_later(
            self._limits.authentication_timeout_ms / 1000, self._authentication_timed_out
        )

    def _authentication_timed_out(self) -> None:
        if self.session.principal is None:
            self._registry.refuse("authentication_timeout", "closing the connection from %s: no authentication within %d ms",
                                  self.session.peer, self._limits.authentication_timeout_ms)
            self.close()

    def promote(self, principal: Principal) -> bool:
        """Called once the connection authenticated: count it for its principal and lift the pre-authentication limits."""
        if not self._registry.promote(principal.name, self.session.peer, principal.connections_max):
            return False
        if self._authentication_deadline is not None:
            self._authentication_deadline.cancel()
        self._decoder.frame_bytes_max = self._limits.frame_bytes_max
        self._in_flight_max = self._limits.in_flight_per_connection_max
        self._update_reading()
        return True

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            reason = "frame_size" if self.session.principal is None else "frame"
            self._registry.refuse(reason, "closing the connection from %s: %s", self.session.peer, exc)
            self.close()
            return
        self._frames_read += len(frames)
        if self._decoder.in_frame and self._read_deadline is None:
            self._read_deadline = asyncio.get_running_loop().call_later(
                self._limits.request_read_timeout_ms / 1000, self._read_timed_out, self._frames_read)
        for frame in frames:
            if type(frame) is RefusedFrame:
                self._answer_refused(frame)
                continue
            reserved = self._reservations.popleft() if type(frame) is KeptFrame else 0
            api_key, api_version, correlation_id, body = split_request(frame)
            if self._order is not None:
                self._order.append([correlation_id, None, False])
            self._in_flight += 1
            task: asyncio.Task | None
            if self._not_started or len(frame) > EAGER_FRAME_BYTES_MAX or reserved:
                # On the next loop turn; and so is every request after it until it has started, so
                # that requests start (and produces append) in the order they came.
                self._not_started += 1
                task = asyncio.get_running_loop().create_task(self._start_later(api_key, api_version, correlation_id, body))
                if reserved:  # held until the request is handled, or its task cancelled (even before it ran)
                    task.add_done_callback(lambda _task, reserved=reserved: self._release(reserved))
            else:
                handling = self._handle(api_key, api_version, correlation_id, body)
                # Up to its first wait right here, in order: a request answered at once (most produces,
                # a fetch with data) is written in this callback, and appends keep the connection's order.
                try:
                    task = start_eagerly(handling)
                except Exception:  # a bug: the router answers every error itself
                    log.exception("request from %s failed", self.session.peer)
                    continue
            if task is not None:
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
        self._update_reading()

    async def _start_later(self, api_key: int, api_version: int, correlation_id: int, body: memoryview) -> None:
        self._not_started -= 1
        await self._handle(api_key, api_version, correlation_id, body)

    # -- what a request in progress may hold --------------------------------------------------------

    def _admit(self, length: int, header: bytes) -> bool:
        """The decoder asks before keeping a frame that did not arrive in one read (see the module's note)."""
        principal = self.session.principal
        if principal is None or self._buffers is None:
            return True  # before authentication frames are small (unauthenticated_frame_bytes_max)
        api_key = int.from_bytes(header[:2], "big")
        if principal.is_tenant and api_key != _PRODUCE and length > self._limits.tenant_request_bytes_max:
            self._refusals.append(errors.InvalidRequestError(
                f"a request of {length} bytes is over the limit of {self._limits.tenant_request_bytes_max} for "
                f"anything but a produce"))
            self._registry.refuse("request_size", "refusing a request of %d bytes from %s (%s): over the limit for "
                                  "its type", length, principal.name, self.session.peer)
            return False
        problem = self._buffers.reserve(principal.name, 4 + length)
        if problem:
            self._refusals.append(errors.BrokerBusyError(f"the broker cannot take this request now: {problem}"))
            self._registry.refuse("request_buffers", "refusing a request of %d bytes from %s (%s): %s", length,
                                  principal.name, self.session.peer, problem)
            return False
        self._reservations.append(4 + length)
        return True

    def _release(self, size: int) -> None:
        principal = self.session.principal
        if self._buffers is not None and principal is not None:
            self._buffers.release(principal.name, size)

    def _answer_refused(self, frame: RefusedFrame) -> None:
        error = self._refusals.popleft()
        if self._order is not None:
            self._registry.refuse("request_buffers", "closing the connection from %s: %s", self.session.peer,
                                  error.message)
            self.close()
            return
        _api_key, _api_version, correlation_id, _body = split_request(frame.header)
        self.answer(correlation_id, m.ENCODER.encode(m.ErrorResponse(error_code=error.errno, error_message=error.message)))

    def _read_timed_out(self, frames_read_before: int) -> None:
        """A request began ``request_read_timeout_ms`` ago: if it has not arrived whole, hang up (a slow
        sender holds a buffer, a share of the budget and a connection)."""
        self._read_deadline = None
        if not self._decoder.in_frame:
            return
        if self._frames_read == frames_read_before:
            self._registry.refuse("request_read_timeout", "closing the connection from %s: a request has not arrived "
                                  "whole within %d ms", self.session.peer, self._limits.request_read_timeout_ms)
            self.close()
            return
        self._read_deadline = asyncio.get_running_loop().call_later(
            self._limits.request_read_timeout_ms / 1000, self._read_timed_out, self._frames_read)

    async def _handle(self, api_key: int, api_version: int, correlation_id: int, body: memoryview) -> None:
        try:
            if self._muted_until:  # this connection was muted once: requests read ahead wait out a mute
                loop = asyncio.get_running_loop()
                while (wait_s := self._muted_until - loop.time()) > 0:
                    await asyncio.sleep(wait_s)
            response = await self._dispatch(self.session, api_key, api_version, correlation_id, body)
            if self._order is not None:
                self._answer_in_order(correlation_id, response)
                return
            if response is not None:
                self.answer(correlation_id, response)
            if self.session.close_after_answer:
                self.close()  # after the answer: close() sends what is buffered first
        finally:
            self._in_flight -= 1
            self._update_reading()

    def _answer_in_order(self, correlation_id: int, response: bytes | None) -> None:
        order = self._order
        for slot in order:  # requests in flight on one connection are few (in_flight_per_connection_max)
            if slot[0] == correlation_id and not slot[2]:
                slot[1], slot[2] = response, True
                break
        while order and order[0][2]:
            answered_id, answer, _done = order.popleft()
            if answer is not None:
                self.answer(answered_id, answer)
        if self.session.close_after_answer and not order:
            self.close()

    def answer(self, correlation_id: int, body: bytes) -> bool:
        """Write an answer to the request ``correlation_id`` (a streaming fetch writes several); False if closed."""
        transport = self._transport
        if transport is None or transport.is_closing():
            return False
        transport.write(encode_response(correlation_id, body))
        return True

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        should_pause = self._in_flight >= self._in_flight_max or self._writing_paused or self._muted is not None
        if should_pause and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

    def mute(self, seconds: float) -> None:
        """Read nothing more from this connection, and start none of the requests already read, for ``seconds``
        (a tenant over its rate: Kafka mutes a throttled channel so; a client that sent many requests at once is
        held back as much as one that waits out ``throttle_time_ms`` itself). Answers already computed go out."""
        if seconds <= 0 or self._transport is None:
            return
        loop = asyncio.get_running_loop()
        self._muted_until = max(self._muted_until, loop.time() + seconds)
        if self._muted is not None:
            self._muted.cancel()
        self._muted = loop.call_later(self._muted_until - loop.time(), self._unmute)
        self._update_reading()

    def _unmute(self) -> None:
        self._muted = None
        self._update_reading()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._authentication_deadline is not None:
            self._authentication_deadline.cancel()
        if self._read_deadline is not None:
            self._read_deadline.cancel()
        if self._muted is not None:
            self._muted.cancel()
        while self._reservations:  # a kept frame that never arrived whole
            self._release(self._reservations.popleft())
        self._transport = None
        if self._admitted:
            self._admitted = False
            principal = self.session.principal
            self._registry.release(None if principal is None else principal.name)
        self._on_close(self)
