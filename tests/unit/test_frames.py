"""tideway.protocol.frames.FrameDecoder: a byte stream cut into frames, however the reads split it."""

import struct

import pytest

from tideway.protocol.frames import FrameDecoder, FrameError


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


@pytest.mark.parametrize("chunk", [1, 5, 13, 100, 4096])
def test_a_refused_frame_is_read_past_without_keeping_it_and_the_stream_goes_on(chunk):
    """Issue 40: what an authenticated caller's frames may hold while they arrive is decided from their header."""
    from tideway.protocol.frames import KeptFrame, RefusedFrame, encode_request

    asked = []

    def admit(length: int, header: bytes) -> bool:
        asked.append((length, header[:2]))
        return header[:2] != b"\x00\x07"  # api key 7 refused

    decoder = FrameDecoder(frame_bytes_min=8, frame_bytes_max=1 << 20, admit=admit)
    stream = (encode_request(1, 0, 1, b"a" * 3000) + encode_request(7, 0, 2, b"b" * 50_000)
              + encode_request(2, 0, 3, b"c" * 10))
    out = []
    largest_buffer = 0
    for start in range(0, len(stream), chunk):
        out += decoder.feed(stream[start:start + chunk])
        largest_buffer = max(largest_buffer, decoder.buffered_bytes)
    assert [isinstance(f, RefusedFrame) for f in out] == [False, True, False]
    assert isinstance(out[0], KeptFrame) == (chunk < 3012)  # kept while it arrived: the caller holds its reservation
    assert out[0][8:] == b"a" * 3000 and out[2][8:] == b"c" * 10
    assert out[1].header[:2] == b"\x00\x07" and int.from_bytes(out[1].header[4:8], "big") == 2
    assert largest_buffer < 4000  # the refused 50 kB frame was never held
    assert not decoder.in_frame
    if chunk < 3000:  # frames that arrive whole in one read are not asked about
        assert (50_008, b"\x00\x07") in asked
