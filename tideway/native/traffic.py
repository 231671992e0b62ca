"""A cluster's traffic: the DESCRIBE_TRAFFIC counters of every broker, added up.

Each broker counts what it carried (as leader, and as queue coordinator) since
it started; leadership moves, so a topic's traffic is the sum over brokers. A
broker that does not answer is left out and named in ``missing``.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from tideway.native.client import TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey

__all__ = ["ClusterTraffic", "describe_traffic"]

log = logging.getLogger(__name__)


@dataclass
class ClusterTraffic:
    # topic -> [messages in, bytes in, messages out, bytes out], summed over the brokers
    topics: dict[str, list[int]] = field(default_factory=dict)
    # minute start (unix seconds) -> the same four figures; minutes that carried nothing are absent
    history: dict[int, list[int]] = field(default_factory=dict)
    missing: list[int] = field(default_factory=list)  # brokers that did not answer


async def describe_traffic(client: TidewayClient, topics: list[str], history_scope: str | None = None) -> ClusterTraffic:
    """Counters of ``topics`` and (with ``history_scope``, a tenant's topic prefix) its last hour by minute."""
    if not client.brokers:
        await client.refresh_metadata()
    request = m.DescribeTrafficRequest(topics=topics, history_scope=history_scope)

    async def ask(node_id: int) -> m.DescribeTrafficResponse | None:
        try:
            connection = await client.connection(node_id)
            return await connection.request(ApiKey.DESCRIBE_TRAFFIC, request)
        except (errors.ConnectionClosedError, errors.ClientTimeoutError, OSError) as exc:
            log.info("traffic: broker %d did not answer (%s)", node_id, exc)
            return None

    nodes = list(client.brokers)
    answers = await asyncio.gather(*(ask(node_id) for node_id in nodes))
    out = ClusterTraffic(topics={topic: [0, 0, 0, 0] for topic in topics})
    for node_id, response in zip(nodes, answers, strict=True):
        if response is None:
            out.missing.append(node_id)
            continue
        for item in response.topics:
            _add(out.topics.setdefault(item.topic, [0, 0, 0, 0]), item)
        for minute in response.history:
            _add(out.history.setdefault(minute.minute, [0, 0, 0, 0]), minute)
    return out


def _add(into: list[int], item: m.TopicTraffic | m.TrafficMinute) -> None:
    into[0] += item.messages_in
    into[1] += item.bytes_in
    into[2] += item.messages_out
    into[3] += item.bytes_out
