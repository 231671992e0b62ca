"""The client connection takes the several answers of a streaming fetch (``FetchResponse.more``).

A small socket server stands in for a broker (a unit test of ``tideway.native.conn`` alone; the
whole path is tests/integration/test_streaming_fetch.py): every answer goes to ``on_answer``, the
last completes the request; answers that come after the request timed out are dropped without
breaking the connection, and a new request on it is answered.
"""

from __future__ import annotations

import asyncio

import pytest

from tideway.native.conn import connect
from tideway.protocol import messages as m
from tideway.protocol.errors import ClientTimeoutError
from tideway.protocol.frames import FrameDecoder, encode_response, split_request


async def _server(answers_for):
    """A server that answers each request with the (delay_s, response) pairs ``answers_for(api, request)`` gives."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder(frame_bytes_min=8, frame_bytes_max=1 << 20)
        while data := await reader.read(65536):
            for frame in decoder.feed(data):
                api_key, _version, correlation_id, body = split_request(frame)
                api = m.ApiKey(api_key)
                for delay_s, response in answers_for(api, m.DECODERS[api].decode(body)):
                    await asyncio.sleep(delay_s)
                    writer.write(encode_response(correlation_id, m.ENCODER.encode(response)))
                    await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _fetch_answers(api, request):
    if api is m.ApiKey.API_VERSIONS:
        return [(0, m.ApiVersionsResponse())]
    return [(0.02, m.FetchResponse(more=True, partitions=[m.FetchPartitionResult(topic="t", partition=0, high_watermark=1)])),
            (0.02, m.FetchResponse(more=True, partitions=[m.FetchPartitionResult(topic="t", partition=0, high_watermark=2)])),
            (0.02, m.FetchResponse(partitions=[m.FetchPartitionResult(topic="t", partition=0, high_watermark=3)]))]


async def test_every_answer_goes_to_on_answer_and_the_last_completes_the_request():
    server, port = await _server(_fetch_answers)
    connection = await connect("127.0.0.1", port)
    try:
        seen: list[tuple[bool, int]] = []
        last = await connection.request(m.ApiKey.FETCH, m.FetchRequest(answers_max=3), timeout_s=5,
                                        on_answer=lambda r: seen.append((r.more, r.partitions[0].high_watermark)))
        assert seen == [(True, 1), (True, 2), (False, 3)]
        assert last.more is False and last.partitions[0].high_watermark == 3
    finally:
        connection.close()
        server.close()


async def test_answers_after_a_timeout_are_dropped_and_the_connection_still_serves():
    server, port = await _server(_fetch_answers)
    connection = await connect("127.0.0.1", port)
    try:
        seen: list[int] = []
        with pytest.raises(ClientTimeoutError):
            await connection.request(m.ApiKey.FETCH, m.FetchRequest(answers_max=3), timeout_s=0.01,
                                     on_answer=lambda r: seen.append(r.partitions[0].high_watermark))
        await asyncio.sleep(0.2)  # the stream's answers come and are dropped
        assert seen == []
        assert not connection.closed
        assert isinstance(await connection.request(m.ApiKey.API_VERSIONS, m.ApiVersionsRequest(), timeout_s=5),
                          m.ApiVersionsResponse)
    finally:
        connection.close()
        server.close()
