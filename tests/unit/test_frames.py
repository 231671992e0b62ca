"""brokers.protocol.frames.FrameDecoder: a byte stream cut into frames, however the reads split it."""

import struct

import pytest

from brokers.protocol.frames import FrameDecoder, FrameError


def _stream(bodies: list[bytes]) -> bytes:
    return b"".join(struct.pack(">i", len(body)) + body for body in bodies)


BODIES = [b"a" * 8, bytes(range(200)), b"z" * 9]


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 5, 11, 12, 13, 100, 217, 1000])
def test_frames_come_out_whole_and_in_order_whatever_the_reads(chunk):
    stream = _stream(BODIES)
    decoder = FrameDecoder(frame_bytes_min=4, frame_bytes_max=1 << 10)
    frames = []
    for start in range(0, len(stream), chunk):
        frames.extend(decoder.feed(stream[start:start + chunk]))
    assert frames == BODIES
    assert decoder.buffered_bytes == 0


def test_frames_are_copies_not_views_of_a_read_buffer_used_again():
    # Client connections read into one buffer per thread: the next read overwrites it.
    buffer = bytearray(_stream(BODIES))
    decoder = FrameDecoder(frame_bytes_min=4, frame_bytes_max=1 << 10)
    frames = decoder.feed(memoryview(buffer))
    buffer[:] = bytes(len(buffer))
    assert frames == BODIES


@pytest.mark.parametrize("prefix_bytes", [4, 10])
def test_a_declared_length_over_the_limit_is_refused_before_the_body_arrives(prefix_bytes):
    decoder = FrameDecoder(frame_bytes_min=4, frame_bytes_max=100)
    with pytest.raises(FrameError):
        decoder.feed((struct.pack(">i", 1 << 30) + b"x" * 6)[:prefix_bytes])


def test_a_length_split_across_reads_is_checked_once_complete():
    decoder = FrameDecoder(frame_bytes_min=4, frame_bytes_max=100)
    assert decoder.feed(struct.pack(">i", 1 << 30)[:2]) == []
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">i", 1 << 30)[2:])
