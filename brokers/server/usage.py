"""Metering at the source: every broker writes what its tenants used to ``__usage``, once a second.

One record per flush and broker, JSON, keyed by the broker (``broker-N``), with a deterministic id
(``broker-N:<start of this process, ms>:<sequence>``): a record that is sent again after a failed
attempt keeps its id, so readers drop duplicates. What a record holds, for tenant topics only
(``t<id>.<queue>``; internal topics are not billed):

* ``ingress``: ``[topic, partition, start, end, messages, bytes]`` per partition this broker leads:
  the batches whose base offset lies in ``[start, end)``, read back from the log, ``end`` being the
  high watermark (what is committed). Where metering got to is committed, after each record is
  acknowledged, as the offsets of the internal group ``__metering``; a broker that becomes leader
  (after a failover, or its own restart) carries on from there, so the tail a crashed broker had not
  reported is metered by whoever leads next. If that commit was lost, the next range starts earlier
  and contains the ranges already reported: readers keep, per partition, only ranges not contained
  in another, so ingress is exact either way.
* ``egress``: ``[topic, messages, bytes]`` served to consumers and delivered to queue receivers since
  the last record (the broker's traffic counters; replication and platform reads are not counted).
  Kept in memory until sent: a crash loses at most the last interval's egress, never counts it twice.
* ``requests``: ``[tenant prefix, count]`` of requests tenant keys made of this broker.
* ``storage``: ``[topic, partition, byte_seconds, partition_seconds]`` per partition led, sampled
  every ``storage_interval_s`` (60 s by default: log size times the seconds since the previous
  sample), so an idle broker writes one record a minute, not one a second.

Records go to ``__usage`` (replication factor 3, or fewer brokers; kept 400 days) with acks=all from
an idempotent producer. Nothing is written while there is nothing to say.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from tideway_server.brokers.replication import Role
from tideway_server.brokers.server.traffic import Traffic, scope_of
from tideway_server.brokers.usage_topic import USAGE_PARTITIONS, USAGE_SETTINGS, USAGE_TOPIC

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.record.batch import ATTRIBUTE_CONTROL, iter_batches

if TYPE_CHECKING:
    from tideway_server.brokers.server.replica_manager import ReplicaManager

__all__ = ["METERING_GROUP", "UsageMeter"]

log = logging.getLogger(__name__)

METERING_GROUP = "__metering"
READ_BYTES = 1 << 20
_RECORD_COUNT = struct.Struct(">i")


class UsageMeter:
    def __init__(self, broker_id: int, replicas: ReplicaManager, traffic: Traffic,
                 create_topics: Callable[[m.CreateTopicsRequest], Awaitable[m.CreateTopicsResponse]],
                 peer_client: Callable[[], object], replication: Callable[[], int], interval_ms: int = 1000,
                 storage_interval_s: float = 60.0) -> None:
        self.source = f"broker-{broker_id}"
        self.incarnation = int(time.time() * 1000)
        self.interval_ms = interval_ms
        self.storage_interval_s = storage_interval_s
        self._replicas = replicas
        self._traffic = traffic
        self._create_topics = create_topics
        self._make_client = peer_client
        self._replication = replication
        self._seq = 0
        self._metered: dict[tuple[str, int], int] = {}  # partitions led: where ingress metering got to
        self._egress_seen: dict[str, tuple[int, int]] = {}
        self._requests_seen: dict[str, int] = {}
        self._sampled_at = time.monotonic()
        self._pending: tuple[bytes, dict[tuple[str, int], int]] | None = None  # a record not yet acknowledged
        self._client = None
        self._producer = None
        self._link = None
        self._topic_ready = False

    # -- the loop ----------------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_ms / 1000)
            try:
                await self.flush()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - metering must never stop the broker; the next flush retries
                log.warning("usage: flush failed (%s); retrying at the next interval", exc)

    async def stop(self) -> None:
        # Bounded: a broker stops while the others may be stopping too, and acks=all could wait for ever. A record
        # left unanswered is sent again by nobody: its egress is the interval a crash may lose (ingress is re-metered).
        if self._producer is not None:
            await self._producer.stop(timeout_s=1.0)
        if self._client is not None:
            await self._client.close()

    async def flush(self) -> None:
        if self._pending is None:
            collected = await self._collect()
            if collected is None:
                return
            self._pending = collected
        value, positions = self._pending
        await self._send(value)
        self._pending = None
        await self._commit(positions)

    # -- what a record says ------------------------------------------------------------------------------

    async def _collect(self) -> tuple[bytes, dict[tuple[str, int], int]] | None:
        now = time.monotonic()
        seconds = max(0.0, now - self._sampled_at)
        sample_storage = seconds >= self.storage_interval_s
        if sample_storage:
            self._sampled_at = now
        ingress, storage, positions = [], [], {}
        led = {key: p for key, p in list(self._replicas.partitions.items())
               if p.role is Role.LEADER and scope_of(key[0]) is not None}
        for key in [k for k in self._metered if k not in led]:
            del self._metered[key]  # no longer leading: whoever leads carries on from the committed position
            partition = self._replicas.partitions.get(key)
            if partition is not None:
                partition.log.stop_counting_appends()
        await self._load_positions([key for key in led if key not in self._metered])
        for (topic, number), partition in led.items():
            start = self._metered.get((topic, number))
            if start is None:
                continue  # its position could not be read yet: next time
            log_ = partition.log
            log_.count_appends()  # from now on its appends are counted as they happen
            end = log_.high_watermark
            if sample_storage:
                storage.append([topic, number, round(log_.size_bytes * seconds), round(seconds, 3)])
            if end > start:
                messages, size = _count(log_, start, end)
                ingress.append([topic, number, start, end, messages, size])
                positions[(topic, number)] = end
                self._metered[(topic, number)] = end
        egress = []
        for topic, counts in self._traffic.topics():
            if scope_of(topic) is None:
                continue
            before = self._egress_seen.get(topic, (0, 0))
            if counts[2] != before[0] or counts[3] != before[1]:
                egress.append([topic, max(0, counts[2] - before[0]), max(0, counts[3] - before[1])])
                self._egress_seen[topic] = (counts[2], counts[3])
        requests = []
        for scope, count in list(self._traffic.requests.items()):
            if count != self._requests_seen.get(scope, 0):
                requests.append([scope, count - self._requests_seen.get(scope, 0)])
                self._requests_seen[scope] = count
        if not (ingress or egress or requests or any(row[2] for row in storage)):
            return None
        self._seq += 1
        record = {"id": f"{self.source}:{self.incarnation}:{self._seq}", "source": self.source,
                  "at_ms": int(time.time() * 1000), "ingress": ingress,
                  "egress": egress, "requests": requests, "storage": storage}
        return json.dumps(record, separators=(",", ":")).encode(), positions

    # -- the brokers ------------------------------------------------------------------------------------

    async def _start(self):
        if self._producer is None:
            from tideway.native.group import CoordinatorLink
            from tideway.native.producer import Producer

            client = self._make_client()
            await client.start()
            self._client = client
            self._producer = Producer(client, acks="all", linger_ms=0)
            await self._producer.start()
            self._link = CoordinatorLink(client, METERING_GROUP)
        if not self._topic_ready:
            await self._ensure_topic()
        return self._client

    async def _ensure_topic(self) -> None:
        request = m.CreateTopicsRequest(topics=[m.NewTopic(name=USAGE_TOPIC, partitions=USAGE_PARTITIONS,
                                                           replication_factor=self._replication(), configs=USAGE_SETTINGS)])
        response = await self._create_topics(request)
        for result in response.topics:
            if result.error_code and result.error_code != errors.TopicAlreadyExistsError.errno:
                raise errors.TidewayError(f"could not create {USAGE_TOPIC}: {result.error_message}")
        self._topic_ready = True

    async def _send(self, value: bytes) -> None:
        await self._start()
        delivered = await self._producer.send(USAGE_TOPIC, value, key=self.source.encode())
        await delivered

    async def _load_positions(self, keys: list[tuple[str, int]]) -> None:
        """Where metering got to for partitions this broker has just come to lead (the log's start when never)."""
        if not keys:
            return
        from tideway.native.group import fetch_committed

        await self._start()
        try:
            committed = await fetch_committed(self._link, keys)
        except errors.TidewayError as exc:
            log.info("usage: metering positions not readable yet (%s)", exc)
            return
        for key in keys:
            offset = committed.get(key, -1)
            partition = self._replicas.partitions.get(key)
            if partition is None:
                continue
            self._metered[key] = offset if offset >= 0 else partition.log.log_start_offset

    async def _commit(self, positions: dict[tuple[str, int], int]) -> None:
        if not positions:
            return
        from tideway.native.group import commit_offsets

        try:
            await commit_offsets(self._link, positions)
        except errors.TidewayError as exc:  # the next range then starts earlier and contains this one
            log.info("usage: metering positions not committed (%s)", exc)


def _count(log_, start: int, end: int) -> tuple[int, int]:
    """(records, bytes) of the batches of ``log_`` whose base offset lies in [start, end).

    From what the log noted as it appended (``Log.appended``); what it did not
    note (appended before counting began, or more than it keeps) is read back.
    """
    appended = log_.appended
    if appended is None:
        return _read_count(log_, start, end)
    messages = size = 0
    if start < log_.appended_from:
        messages, size = _read_count(log_, start, min(end, log_.appended_from))
    while appended and appended[0][0] < end:
        base, records, batch_bytes = appended.popleft()
        if base >= start:
            messages += records
            size += batch_bytes
    return messages, size


def _read_count(log_, start: int, end: int) -> tuple[int, int]:
    """``_count`` by reading the batches back."""
    messages = size = 0
    offset = max(start, log_.log_start_offset)
    while offset < end:
        data = log_.read(offset, READ_BYTES, max_offset=end).records
        if not data:
            break
        last_base = offset
        for position, base, batch_size in iter_batches(data):
            last_base = base
            if start <= base < end:
                if not data[position + 22] & ATTRIBUTE_CONTROL:  # a transaction's marker stores bytes, no message
                    messages += _RECORD_COUNT.unpack_from(data, position + 57)[0]
                size += batch_size
            offset = max(offset, base + _last_delta(data, position) + 1)
        if offset <= last_base:
            break
    return messages, size


def _last_delta(data: bytes, position: int) -> int:
    return struct.unpack_from(">i", data, position + 23)[0]
