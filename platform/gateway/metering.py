"""The gateway's own metering: REST requests and WebSocket frames per tenant queue, and the bytes they carried.

The brokers meter messages and bytes in and out; the gateway adds what only it sees — its requests and the
bytes of HTTP bodies and WebSocket frames — and writes them to ``__usage`` of the queue's cluster once a
second, in the brokers' record format with a ``gateway`` list of ``[topic, requests, bytes_in, bytes_out]``
(``bytes_in``: from the client; ``bytes_out``: to it). Ids are ``gateway-<host>-<pid>:<start ms>:<sequence>``;
a record not acknowledged is sent again unchanged. A gateway crash loses at most the last second.
Requests that name no queue are not metered here (they are the control plane's).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time

from tideway_server.brokers.usage_topic import USAGE_PARTITIONS, USAGE_SETTINGS, USAGE_TOPIC
from tideway_server.gateway import pool
from tideway_server.gateway.catalog import QueueInfo

from tideway.protocol import errors

log = logging.getLogger(__name__)

INTERVAL_S = float(os.environ.get("TIDEWAY_GATEWAY_USAGE_INTERVAL_S", "1"))


class GatewayMeter:
    def __init__(self) -> None:
        self.source = f"gateway-{socket.gethostname()}-{os.getpid()}"
        self.incarnation = int(time.time() * 1000)
        self._seq = 0
        self._counts: dict[tuple[str, str], list[int]] = {}  # (bootstrap, topic) -> [requests, bytes in, bytes out]
        self._pending: dict[str, bytes] = {}  # bootstrap -> a record not yet acknowledged
        self._task: asyncio.Task | None = None

    def count(self, queue: QueueInfo | None, *, requests: int = 1, bytes_in: int = 0, bytes_out: int = 0) -> None:
        if queue is None or INTERVAL_S <= 0:
            return
        counts = self._counts.get((queue.bootstrap, queue.broker_topic))
        if counts is None:
            counts = self._counts[(queue.bootstrap, queue.broker_topic)] = [0, 0, 0]
        counts[0] += requests
        counts[1] += bytes_in
        counts[2] += bytes_out
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._flush_forever())

    async def _flush_forever(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL_S)
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - metering never breaks the gateway; the next second retries
                log.warning("gateway usage: flush failed (%s); retrying", exc)

    async def flush(self) -> None:
        counts, self._counts = self._counts, {}
        by_cluster: dict[str, list] = {}
        for (bootstrap, topic), (requests, bytes_in, bytes_out) in sorted(counts.items()):
            by_cluster.setdefault(bootstrap, []).append([topic, requests, bytes_in, bytes_out])
        for bootstrap, rows in by_cluster.items():
            if bootstrap in self._pending:  # the earlier record first, unchanged; these rows go with the next one
                for topic, requests, bytes_in, bytes_out in rows:
                    again = self._counts.setdefault((bootstrap, topic), [0, 0, 0])
                    again[0] += requests
                    again[1] += bytes_in
                    again[2] += bytes_out
                continue
            self._seq += 1
            record = {"id": f"{self.source}:{self.incarnation}:{self._seq}", "source": self.source,
                      "at_ms": int(time.time() * 1000), "ingress": [], "egress": [], "requests": [], "storage": [],
                      "gateway": rows}
            self._pending[bootstrap] = json.dumps(record, separators=(",", ":")).encode()
        for bootstrap, value in list(self._pending.items()):
            await self._send(bootstrap, value)
            del self._pending[bootstrap]

    async def _send(self, bootstrap: str, value: bytes) -> None:
        producer = await pool.producer(bootstrap)
        try:
            await (await producer.send(USAGE_TOPIC, value, key=self.source.encode()))
        except errors.UnknownTopicOrPartitionError:
            # No broker has metered anything yet: create the topic as they would, then send next time.
            client = await pool.client(bootstrap)
            replication = min(3, max(1, len(client.brokers)))
            try:
                await client.create_topic(USAGE_TOPIC, partitions=USAGE_PARTITIONS, replication_factor=replication,
                                          configs=USAGE_SETTINGS)
            except errors.TopicAlreadyExistsError:
                pass
            raise


meter = GatewayMeter()
