"""Zigzag varints as Kafka's records use them (protobuf's sint64 encoding).

A value is zigzag-mapped (0, -1, 1, -2, ... -> 0, 1, 2, 3, ...) so small
negative numbers stay short, then written 7 bits at a time, low group first,
with the high bit of each byte set when more bytes follow.

The hot paths (building and reading a batch) inline the one-byte case and use
the precomputed table below; these functions are the general case.
"""

from __future__ import annotations

# What a decoder reads from: a frame's memoryview, a file's bytes, a request's bytearray.
Buffer = bytes | bytearray | memoryview

__all__ = ["SMALL_VARINTS", "SMALL_VARINT_LIMIT", "Buffer", "decode_varint", "encode_varint"]


def encode_varint(value: int) -> bytes:
    """Return the zigzag varint bytes of a signed 64-bit ``value``."""
    unsigned = (value << 1) ^ (value >> 63)
    out = bytearray()
    while unsigned > 0x7F:
        out.append((unsigned & 0x7F) | 0x80)
        unsigned >>= 7
    out.append(unsigned)
    return bytes(out)


def decode_varint(buffer: Buffer, position: int) -> tuple[int, int]:
    """Decode a zigzag varint at ``position``; return (value, next position).

    Raises ValueError on a varint longer than 10 bytes or cut short.
    """
    shift = 0
    unsigned = 0
    end = len(buffer)
    while True:
        if position >= end:
            raise ValueError("varint cut short")
        byte = buffer[position]
        position += 1
        unsigned |= (byte & 0x7F) << shift
        if not byte & 0x80:
            break
        shift += 7
        if shift > 63:
            raise ValueError("varint longer than 10 bytes")
    return (unsigned >> 1) ^ -(unsigned & 1), position


# Precomputed encodings for values in [-SMALL_VARINT_LIMIT, SMALL_VARINT_LIMIT):
# lengths, deltas and counts of ordinary batches fall in this range, so the
# builder looks them up instead of looping.
SMALL_VARINT_LIMIT = 1 << 16
SMALL_VARINTS: list[bytes] = [b""] * (2 * SMALL_VARINT_LIMIT)
for _value in range(-SMALL_VARINT_LIMIT, SMALL_VARINT_LIMIT):
    SMALL_VARINTS[_value + SMALL_VARINT_LIMIT] = encode_varint(_value)
del _value
