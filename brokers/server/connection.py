"""One client connection to a broker: frames in, handler tasks, frames out.

Requests on a connection are pipelined: each frame becomes a task, and answers
go out as they complete, matched by correlation id. Handlers append before
their first ``await``, and tasks start in the order they were created, so
produce requests on one connection are appended in the order they were sent.

Everything is bounded: at most ``in_flight_max`` requests per connection
(reading pauses beyond it), one partial frame of at most ``frame_bytes_max``,
and reading pauses while the transport's write buffer is full.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from brokers.protocol.frames import FrameDecoder, FrameError, encode_response, split_request

__all__ = ["BrokerConnection"]

log = logging.getLogger(__name__)

Dispatch = Callable[[int, int, memoryview], Awaitable[bytes | None]]


class BrokerConnection(asyncio.Protocol):
    def __init__(self, dispatch: Dispatch, *, frame_bytes_max: int, in_flight_max: int, on_close) -> None:
        self._dispatch = dispatch
        self._decoder = FrameDecoder(frame_bytes_min=8, frame_bytes_max=frame_bytes_max)
        self._in_flight_max = in_flight_max
        self._in_flight = 0
        self._transport: asyncio.Transport | None = None
        self._reading_paused = False
        self._writing_paused = False
        self._on_close = on_close
        self._tasks: set[asyncio.Task] = set()
        self.peer = "?"

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.peer = str(transport.get_extra_info("peername"))

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except FrameError as exc:
            log.warning("closing connection from %s: %s", self.peer, exc)
            self.close()
            return
        loop = asyncio.get_running_loop()
        for frame in frames:
            api_key, api_version, correlation_id, body = split_request(frame)
            self._in_flight += 1
            task = loop.create_task(self._handle(api_key, api_version, correlation_id, body))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._update_reading()

    async def _handle(self, api_key: int, api_version: int, correlation_id: int, body: memoryview) -> None:
        try:
            response = await self._dispatch(api_key, api_version, body)
            if response is not None and self._transport is not None and not self._transport.is_closing():
                self._transport.write(encode_response(correlation_id, response))
        finally:
            self._in_flight -= 1
            self._update_reading()

    def _update_reading(self) -> None:
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        should_pause = self._in_flight >= self._in_flight_max or self._writing_paused
        if should_pause and not self._reading_paused:
            transport.pause_reading()
            self._reading_paused = True
        elif not should_pause and self._reading_paused:
            transport.resume_reading()
            self._reading_paused = False

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
        self._transport = None
        self._on_close(self)
