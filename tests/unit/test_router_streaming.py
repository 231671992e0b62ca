"""The router treats every answer of a streaming fetch as it treats the last one.

A tenant's names are rewritten (its own ``orders``, never ``t7.orders``) in each answer the handler
sends ahead through ``more``, as in the answer it returns, and each is written under the request's
correlation id. The router and authorizer are the real ones; a stand-in handler answers and a
stand-in connection records what is written (the whole path: tests/integration/test_streaming_fetch.py).
"""

from __future__ import annotations

import msgspec
from tideway_server.brokers.security.acl import CONSUME, Grant
from tideway_server.brokers.security.principal import Principal
from tideway_server.brokers.server.authorizer import Authorizer
from tideway_server.brokers.server.connection import Listener, Session
from tideway_server.brokers.server.router import Route, Router

from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey


class _Connection:
    def __init__(self) -> None:
        self.written: list[tuple[int, m.FetchResponse]] = []

    def answer(self, correlation_id: int, body: bytes) -> None:
        self.written.append((correlation_id, msgspec.msgpack.decode(body, type=m.FetchResponse)))


async def test_every_streamed_answer_is_renamed_for_the_tenant_and_written_under_the_requests_id():
    seen_topics: list[str] = []

    async def fetch(request: m.FetchRequest, more) -> m.FetchResponse:
        topic = request.partitions[0].topic  # as the broker knows it
        seen_topics.append(topic)
        for high_watermark in (1, 2):
            more(m.FetchResponse(more=True, partitions=[m.FetchPartitionResult(topic=topic, partition=0,
                                                                                high_watermark=high_watermark)]))
        return m.FetchResponse(partitions=[m.FetchPartitionResult(topic=topic, partition=0, high_watermark=3)])

    router = Router({ApiKey.FETCH: Route(fetch, answers_more=True)}, Authorizer(), name="broker 1")
    connection = _Connection()
    session = Session(listener=Listener.CLIENT, principal=Principal.tenant(7, Grant(frozenset({CONSUME})), "abc"))
    session.connection = connection
    request = m.FetchRequest(answers_max=3, partitions=[m.FetchPartition(topic="orders", partition=0, fetch_offset=0)])

    last = await router.dispatch(session, int(ApiKey.FETCH), 0, 41, memoryview(m.ENCODER.encode(request)))

    assert seen_topics == ["t7.orders"]
    assert [(cid, r.more, r.partitions[0].topic, r.partitions[0].high_watermark) for cid, r in connection.written] == [
        (41, True, "orders", 1), (41, True, "orders", 2)]
    final = msgspec.msgpack.decode(last, type=m.FetchResponse)
    assert (final.more, final.partitions[0].topic, final.partitions[0].high_watermark) == (False, "orders", 3)
