"""One pipelined connection from a client to a broker.

Requests get increasing correlation ids and a future each; a reader matches
answers to futures. A broken connection fails every pending request with
ConnectionClosedError (the cause chained); an answer that cannot be framed or
matched means the stream is desynchronised, so the socket is closed.

``open`` authenticates with the given credentials (``credentials.py``) before
it returns, so every request sent on an open connection is the principal's.
TLS: pass an ``ssl.SSLContext`` (``tls_context`` builds one).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any

import msgspec

from tideway.protocol import messages as m
from tideway.protocol.errors import (
    ClientTimeoutError,
    ConnectionClosedError,
    TidewayError,
    error_for_code,
)
from tideway.protocol.frames import FrameDecoder, FrameError, encode_request, split_response

__all__ = ["Connection", "connect", "tls_context"]

log = logging.getLogger(__name__)

RESPONSE_BYTES_MAX = 200 << 20
_FETCH = m.ApiKey.FETCH


READ_BUFFER_BYTES = 256 << 10
_read_buffers = threading.local()


class _Protocol(asyncio.BufferedProtocol):
    """Reads land in one buffer per thread, copied out (into the frame decoder) as soon as they do.

    asyncio's plain ``Protocol`` (Python 3.11, default loop) makes a new
    256 KiB bytes object for every read (``socket.recv(262144)``): about
    12 µs more per read than ``recv_into`` a buffer kept for the purpose
    (a send and a receive on a socketpair: 14.2 against 2.6 µs), and every
    acknowledgement and delivery is a read. One buffer
    serves every connection of the thread: the transport fills it and calls
    ``buffer_updated`` at once, before any other read.
    """

    def __init__(self, connection: Connection) -> None:
        self._connection = connection

    def get_buffer(self, sizehint: int) -> memoryview:
        view = getattr(_read_buffers, "view", None)
        if view is None:
            view = _read_buffers.view = memoryview(bytearray(READ_BUFFER_BYTES))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self._connection._data_received(_read_buffers.view[:nbytes])

    def connection_lost(self, exc: Exception | None) -> None:
        self._connection._lost(exc)


class Connection:
    """A connection to one broker; safe to share between tasks of one loop."""

    def __init__(self, host: str, port: int, *, credentials=None, ssl_context: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.port = port
        self.credentials = credentials  # tideway.native.credentials.Credentials, or None: unauthenticated
        self.ssl_context = ssl_context
        self.principal = ""  # who the broker says this connection acts as, once authenticated
        self._transport: asyncio.Transport | None = None
        # correlation id -> (future, api, a function given the answer in the read callback itself, or None)
        self._pending: dict[int, tuple[asyncio.Future, m.ApiKey, Callable[[msgspec.Struct], None] | None]] = {}
        self._next_correlation_id = 0
        self._decoder = FrameDecoder(frame_bytes_min=4, frame_bytes_max=RESPONSE_BYTES_MAX)
        self._closed_error: Exception | None = None

    @property
    def closed(self) -> bool:
        return self._transport is None or self._closed_error is not None

    async def open(self, timeout_s: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            transport, _ = await asyncio.wait_for(
                loop.create_connection(lambda: _Protocol(self), self.host, self.port, ssl=self.ssl_context,
                                       server_hostname=self.host if self.ssl_context is not None else None),
                timeout_s,
            )
        except (OSError, TimeoutError) as exc:
            raise ConnectionClosedError(f"cannot connect to broker {self.host}:{self.port}: {exc}") from exc
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._transport = transport  # type: ignore[assignment]
        if self.credentials is not None:
            try:
                self.principal = await self.credentials.authenticate(self)
            except TidewayError:
                self.close()
                raise

    async def request(self, api: m.ApiKey, body: msgspec.Struct, *, timeout_s: float = 30.0, expect_response: bool = True,
                      on_answer: Callable[[Any], None] | None = None):
        """Send one request and return its decoded response (None if not expected).

        Raises the BrokerError of a top-level error code, ConnectionClosedError
        if the connection breaks, ClientTimeoutError after ``timeout_s``.
        ``on_answer(response)``, if given, is called with a successful answer
        as soon as it is read, a loop turn before this returns it (a consumer
        hands records to ``getmany`` from there). A streaming fetch
        (``answers_max`` > 1) gives it every answer; this returns the last.
        """
        future = self.send(api, body, expect_response=expect_response, on_answer=on_answer)
        if future is None:
            return None
        # A timer on the future itself rather than asyncio.wait_for: every request of every
        # replica fetcher and client goes through here.
        timer = asyncio.get_running_loop().call_later(timeout_s, _time_out, future, api, self, timeout_s)
        try:
            return await future
        finally:
            timer.cancel()

    def send(self, api: m.ApiKey, body: msgspec.Struct, *, expect_response: bool = True,
             on_answer: Callable[[Any], None] | None = None) -> asyncio.Future | None:
        """Write a request now; return the future of its response."""
        if self._closed_error is not None or self._transport is None:
            raise ConnectionClosedError(f"connection to {self.host}:{self.port} is closed") from self._closed_error
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (correlation_id + 1) & 0x7FFFFFFF
        future = None
        if expect_response:
            future = asyncio.get_running_loop().create_future()
            self._pending[correlation_id] = (future, api, on_answer)
        self._transport.write(encode_request(int(api), 0, correlation_id, m.ENCODER.encode(body)))
        return future

    def _data_received(self, data: bytes | memoryview) -> None:
        try:
            frames = self._decoder.feed(data)
            for frame in frames:
                correlation_id, body = split_response(frame)
                entry = self._pending.pop(correlation_id, None)
                if entry is None:
                    raise FrameError(f"answer with unknown correlation id {correlation_id}")
                future, api, on_answer = entry
                try:
                    response: Any = m.RESPONSE_DECODERS[api].decode(body)
                except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                    raise FrameError(f"undecodable {api.name} answer: {exc}") from exc
                if api is _FETCH and response.more:
                    # A streaming fetch: more answers follow under this correlation id, each
                    # given to on_answer; the last one completes the future.
                    self._pending[correlation_id] = entry
                    if on_answer is not None and not future.done():  # done: timed out or cancelled, dropped
                        _give(on_answer, response, future)
                    continue
                if future.done():
                    continue
                if response.error_code:
                    future.set_exception(error_for_code(response.error_code, response.error_message))
                    continue
                if on_answer is None or _give(on_answer, response, future):
                    future.set_result(response)
        except FrameError as exc:
            log.warning("closing connection to %s:%d: %s", self.host, self.port, exc)
            self._fail(exc)

    def _lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionResetError("closed by the broker"))

    def _fail(self, cause: Exception) -> None:
        if self._closed_error is None:
            self._closed_error = cause
        pending, self._pending = self._pending, {}
        for future, api, _on_answer in pending.values():
            if not future.done():
                error = ConnectionClosedError(
                    f"connection to {self.host}:{self.port} broke during {api.name}: {cause}"
                )
                error.__cause__ = cause
                future.set_exception(error)
        if self._transport is not None:
            self._transport.close()

    def close(self) -> None:
        self._fail(ConnectionAbortedError("closed by the client"))


async def connect(host: str, port: int, timeout_s: float = 10.0, *, credentials=None,
                  ssl_context: ssl.SSLContext | None = None) -> Connection:
    """An open (and, with ``credentials``, authenticated) connection to ``host``:``port``."""
    connection = Connection(host, port, credentials=credentials, ssl_context=ssl_context)
    await connection.open(timeout_s)
    return connection


def tls_context(cafile: str | None = None) -> ssl.SSLContext:
    """A client TLS context that verifies servers against ``cafile`` (or the system's CAs)."""
    return ssl.create_default_context(cafile=cafile)


def _give(on_answer: Callable[[Any], None], response: Any, future: asyncio.Future) -> bool:
    """``on_answer(response)``; False if it raised (the caller awaiting ``future`` gets the error)."""
    try:
        on_answer(response)
    except Exception as exc:  # noqa: BLE001 - the caller awaiting the answer gets it
        future.set_exception(exc)
        return False
    return True


def _time_out(future: asyncio.Future, api: m.ApiKey, connection: Connection, timeout_s: float) -> None:
    if not future.done():
        future.set_exception(ClientTimeoutError(
            f"{api.name} to {connection.host}:{connection.port} got no answer within {timeout_s:.1f}s"))

