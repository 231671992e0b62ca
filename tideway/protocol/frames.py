"""Framing of the native protocol. Pure codecs: no sockets here.

Every frame starts with its length so a reader never has to parse a body to
find the next frame, and requests carry a correlation id so a connection can
pipeline many of them::

    request  := length:int32  api_key:int16  api_version:int16  correlation_id:int32  body
    response := length:int32  correlation_id:int32  body

``length`` counts the bytes after itself. Integers are big-endian. ``body`` is
msgpack (see ``messages.py``); record batches ride inside it as msgpack binary.

A frame whose length is below the fixed header or above the configured
maximum can never be trusted to resync the stream, so the decoder raises
FrameError and the connection is closed: only that connection.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import NamedTuple

__all__ = [
    "FrameDecoder",
    "FrameError",
    "KeptFrame",
    "RefusedFrame",
    "REQUEST_HEADER_BYTES",
    "RESPONSE_HEADER_BYTES",
    "encode_request",
    "encode_response",
]

_LENGTH = struct.Struct(">i")
_REQUEST_HEADER = struct.Struct(">ihhi")  # length, api key, version, correlation id
_RESPONSE_HEADER = struct.Struct(">ii")  # length, correlation id
_REQUEST_FIELDS = struct.Struct(">hhi")  # after the length: api key, version, correlation id
REQUEST_HEADER_BYTES = 8  # after the length
RESPONSE_HEADER_BYTES = 4


class FrameError(Exception):
    """Raised when the byte stream cannot be a sequence of valid frames."""


def encode_request(api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    return _REQUEST_HEADER.pack(REQUEST_HEADER_BYTES + len(body), api_key, api_version, correlation_id) + body


def encode_response(correlation_id: int, body: bytes) -> bytes:
    return _RESPONSE_HEADER.pack(RESPONSE_HEADER_BYTES + len(body), correlation_id) + body


class KeptFrame(bytes):
    """A frame that did not arrive in one read and was kept, with ``admit``'s leave, while it did (the caller
    holds what it reserved for it until the frame is dealt with)."""

    __slots__ = ()


class RefusedFrame(NamedTuple):
    """A frame the decoder's ``admit`` refused: its bytes were skipped, never kept; its first header bytes remain
    (a request's api key, version and correlation id), so the refusal can be answered."""

    header: bytes


# What ``admit`` is given of a frame about to be kept while it arrives: its length and first bytes after the
# length (up to REQUEST_HEADER_BYTES); False: skip it.
Admit = Callable[[int, bytes], bool]


class FrameDecoder:
    """Splits a byte stream into frames; ``feed`` returns the complete ones.

    Each frame is returned as bytes *after* the length prefix. The decoder
    keeps at most one partial frame (bounded by ``frame_bytes_max``). With
    ``admit``, a frame that does not arrive in one read is kept only if
    ``admit(length, header)`` says so once its header is in; a refused one is
    read past without keeping its bytes and comes out as a ``RefusedFrame``.
    """

    __slots__ = ("_admit", "_admitted", "_buffer", "_frame_bytes_min", "_skip", "_skipped_header", "frame_bytes_max")

    def __init__(self, *, frame_bytes_min: int, frame_bytes_max: int, admit: Admit | None = None) -> None:
        self._buffer = bytearray()
        self._frame_bytes_min = frame_bytes_min
        self.frame_bytes_max = frame_bytes_max  # may be raised later (a server lifts it once a connection authenticates)
        self._admit = admit
        self._admitted = False  # the partial frame in the buffer was admitted
        self._skip = 0  # bytes of a refused frame still to read past
        self._skipped_header = b""

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    @property
    def in_frame(self) -> bool:
        """True while a frame has begun and not ended (kept or read past)."""
        return bool(self._buffer) or self._skip > 0

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes | RefusedFrame]:
        frames: list[bytes | RefusedFrame] = []
        if self._skip:
            skipped = min(self._skip, len(data))
            self._skip -= skipped
            if self._skip:
                return frames
            frames.append(RefusedFrame(self._skipped_header))
            data = memoryview(data)[skipped:]
        buffer = self._buffer
        if not buffer:
            # Nearly every read: frames are cut from ``data`` itself, one copy each, not via the buffer.
            cut, position = self._cut(data)
            frames += cut
            if position < len(data):  # a partial frame, its length checked if it has one yet
                self._keep(memoryview(data)[position:] if position else data)
            return frames
        if len(buffer) < 4 <= len(buffer) + len(data):
            # A new frame starts: check its declared length before keeping any of it.
            (length,) = _LENGTH.unpack_from(bytes(buffer) + bytes(data[: 4 - len(buffer)]))
            self._check_length(length)
        if not self._admitted and self._admit is not None:
            rest = bytes(buffer) + bytes(data)
            buffer.clear()
            return frames + self.feed(rest)  # (bounded: the buffer held less than a header)
        buffer += data
        cut, position = self._cut(buffer, kept_first=self._admitted)
        if position:
            self._admitted = False
            del buffer[:position]
        frames += cut
        if buffer and not self._admitted and self._admit is not None:
            rest = bytes(buffer)
            buffer.clear()
            self._keep(rest)
        return frames

    def _keep(self, partial: bytes | bytearray | memoryview) -> None:
        """Keep the start of a frame that has not arrived whole, if ``admit`` lets it (once its header is in)."""
        if self._admit is None or len(partial) < 4:
            self._buffer += partial
            return
        (length,) = _LENGTH.unpack_from(partial, 0)
        if len(partial) < 4 + min(length, REQUEST_HEADER_BYTES):
            self._buffer += partial  # not yet the header: at most a few bytes
            return
        header = bytes(partial[4 : 4 + REQUEST_HEADER_BYTES])
        if self._admit(length, header):
            self._admitted = True
            self._buffer += partial
            return
        self._skipped_header = header
        self._skip = 4 + length - len(partial)

    def _cut(self, source: bytes | bytearray | memoryview, kept_first: bool = False) -> tuple[list[bytes], int]:
        """The whole frames at the start of ``source`` (copies), and where the rest begins. ``kept_first``: the
        first one is an admitted partial frame, now whole (a KeptFrame)."""
        frames: list[bytes] = []
        position = 0
        end = len(source)
        while end - position >= 4:
            (length,) = _LENGTH.unpack_from(source, position)
            self._check_length(length)
            if end - position - 4 < length:
                break
            frames.append((KeptFrame if kept_first and not position else bytes)(source[position + 4 : position + 4 + length]))
            position += 4 + length
        return frames, position

    def _check_length(self, length: int) -> None:
        if length < self._frame_bytes_min or length > self.frame_bytes_max:
            raise FrameError(f"frame length {length} outside [{self._frame_bytes_min}, {self.frame_bytes_max}]")


def split_request(frame: bytes) -> tuple[int, int, int, memoryview]:
    """(api key, api version, correlation id, body) of a request frame."""
    api_key, api_version, correlation_id = _REQUEST_FIELDS.unpack_from(frame, 0)
    return api_key, api_version, correlation_id, memoryview(frame)[REQUEST_HEADER_BYTES:]


def split_response(frame: bytes) -> tuple[int, memoryview]:
    (correlation_id,) = _LENGTH.unpack_from(frame, 0)  # (an int32 as the length is)
    return correlation_id, memoryview(frame)[RESPONSE_HEADER_BYTES:]
