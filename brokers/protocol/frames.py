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

__all__ = [
    "FrameDecoder",
    "FrameError",
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


class FrameDecoder:
    """Splits a byte stream into frames; ``feed`` returns the complete ones.

    Each frame is returned as bytes *after* the length prefix. The decoder
    keeps at most one partial frame (bounded by ``frame_bytes_max``).
    """

    __slots__ = ("_buffer", "_frame_bytes_min", "frame_bytes_max")

    def __init__(self, *, frame_bytes_min: int, frame_bytes_max: int) -> None:
        self._buffer = bytearray()
        self._frame_bytes_min = frame_bytes_min
        self.frame_bytes_max = frame_bytes_max  # may be raised later (a server lifts it once a connection authenticates)

    @property
    def buffered_bytes(self) -> int:
        return len(self._buffer)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        buffer = self._buffer
        if not buffer:
            # Nearly every read: frames are cut from ``data`` itself, one copy each, not via the buffer.
            frames, position = self._cut(data)
            if position < len(data):  # a partial frame, its length checked if it has one yet
                buffer += memoryview(data)[position:] if position else data
            return frames
        if len(buffer) < 4 <= len(buffer) + len(data):
            # A new frame starts: check its declared length before keeping any of it.
            (length,) = _LENGTH.unpack_from(bytes(buffer) + bytes(data[: 4 - len(buffer)]))
            self._check_length(length)
        buffer += data
        frames, position = self._cut(buffer)
        if position:
            del buffer[:position]
        return frames

    def _cut(self, source: bytes | bytearray | memoryview) -> tuple[list[bytes], int]:
        """The whole frames at the start of ``source`` (copies), and where the rest begins."""
        frames: list[bytes] = []
        position = 0
        end = len(source)
        while end - position >= 4:
            (length,) = _LENGTH.unpack_from(source, position)
            self._check_length(length)
            if end - position - 4 < length:
                break
            frames.append(bytes(source[position + 4 : position + 4 + length]))
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
