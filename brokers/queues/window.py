"""Reading a share-partition's records into its window: from the local log when this broker leads the
partition, else from the leader over the cluster's internal listener (as a queue reader, not metered).

A record is deliverable at its timestamp plus the queue's delivery delay, or at the time its deadline header
names (deliver-at). The window holds at most WINDOW_RECORDS_MAX records ahead of the oldest unfinished one.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from tideway_server.brokers.queues.held import Coordinator, ShareState
from tideway_server.brokers.replication import Role
from tideway_server.brokers.storage import TopicConfig

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.headers import DEADLINE_HEADER
from tideway.record.batch import decode_records, iter_batches, read_header
from tideway.record.markers import AbortedFilter

if TYPE_CHECKING:
    from tideway.native.client import TidewayClient

# A share-partition whose remote leader may have deleted records (a purge) asks for its log start at most this
# often while receivers use it; a local leader's is looked at on every receive. (SQS lets a purge take 60 s.)
LOG_START_CHECK_S = 2.0
WINDOW_RECORDS_MAX = 20_000  # records read ahead of the oldest unfinished one, per share-partition
READ_BYTES = 256 << 10


class WindowReader:
    def __init__(self, coordinator: Coordinator, peer_client: Callable[[], TidewayClient]) -> None:
        self.coordinator = coordinator
        self._peer_client = peer_client  # a client of the cluster acting as this broker
        self.client: TidewayClient | None = None  # started on first use (cluster_client)

    async def cluster_client(self) -> TidewayClient:
        if self.client is None:
            # As a cluster peer, through this broker's internal listener: its metadata names peers' internal listeners.
            client = self._peer_client()
            await client.start()
            if self.client is None:
                self.client = client
            else:
                await client.close()
        return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def local_leader(self, topic: str, partition: int):
        local = self.coordinator.local_partition(topic, partition)
        return local if local is not None and local.role is Role.LEADER else None

    async def log_start(self, topic: str, partition: int) -> int:
        local = self.local_leader(topic, partition)
        if local is not None:
            return local.log.log_start_offset
        client = await self.cluster_client()
        offset, _ = await client.list_offset(topic, partition, m.EARLIEST_TIMESTAMP)
        return offset

    async def follow_log_start(self, state: ShareState) -> None:
        """Drop from the window what the log no longer holds (records deleted by a purge or retention)."""
        local = self.local_leader(state.topic, state.partition)
        if local is not None:
            start = local.log.log_start_offset
        else:
            now = time.monotonic()
            if not state.share.window_records or now < state.log_start_checked + LOG_START_CHECK_S:
                return
            state.log_start_checked = now
            try:
                start = await self.log_start(state.topic, state.partition)
            except errors.TidewayError:
                return  # the next check asks again
        if start > state.share.start_offset:
            drop_below(state, start)

    async def read(self, state: ShareState, config: TopicConfig) -> None:
        """Read records after the window into it (one read)."""
        async with state.reading:
            share = state.share
            if share.window_records >= WINDOW_RECORDS_MAX and not share.restored:
                return
            offset = share.end_offset
            local = self.local_leader(state.topic, state.partition)
            if local is not None:
                # Committed data only: up to the last stable offset, without aborted transactions.
                log_ = local.log
                stable = log_.last_stable_offset
                if offset >= stable:
                    state.log_end_known = stable
                    return
                if offset < log_.log_start_offset:
                    drop_below(state, log_.log_start_offset)
                    offset = share.end_offset
                data = log_.read(offset, READ_BYTES, max_offset=stable).records
                aborted = [(t.producer_id, t.first_offset) for t in log_.aborted_between(offset, stable)] \
                    if log_.transactions.aborted else ()
            else:
                data, stable, aborted = await self._fetch_remote(state, offset)
            self.add(state, config, data, offset, stable, aborted)

    async def read_restored(self, state: ShareState, config: TopicConfig) -> None:
        """A share-partition restored from its snapshot (a failover, or unloaded while idle): read up to its last
        row now, so every record its state names is in the window."""
        while state.share.restored:
            before = state.share.end_offset
            await self.read(state, config)
            if state.share.end_offset == before:
                break

    def add(self, state: ShareState, config: TopicConfig, data: bytes, offset: int, stable: int,
            aborted=()) -> None:
        """Records read from ``offset`` up to the last stable offset ``stable`` into the window, but not those of
        ``aborted`` transactions nor markers (the caller holds ``state.reading``)."""
        state.log_end_known = stable
        if not data:
            return
        share = state.share
        delay = config.delivery_delay_ms
        added = []
        append, records = added.append, state.records
        end = offset
        keep = AbortedFilter(aborted)
        for position, _base, _size in iter_batches(data):
            header = read_header(data, position)
            end = max(end, header.next_offset)  # past markers and aborted records too: they take offsets
            if not keep.delivers(header):
                continue
            for record in decode_records(data, position):
                record_offset = record.offset
                if record_offset < offset:
                    continue
                available_at = record.timestamp_ms + delay if delay else 0
                if record.headers:
                    for name, value in record.headers:
                        if name == DEADLINE_HEADER and value:
                            try:
                                available_at = int(value)
                            except ValueError:
                                pass
                append((record_offset, record.key, available_at))
                records[record_offset] = record
        share.add_records(added, end)

    async def _fetch_remote(self, state: ShareState, offset: int) -> tuple[bytes, int, list]:
        """(records, last stable offset, aborted transactions) read from the remote leader (READ_COMMITTED)."""
        client = await self.cluster_client()
        try:
            result = await client.fetch(state.topic, state.partition, offset, max_bytes=READ_BYTES, retry_for_s=0,
                                        replica_id=m.QUEUE_READER)
        except errors.OffsetOutOfRangeError:
            start = await self.log_start(state.topic, state.partition)
            if offset < start:
                drop_below(state, start)
            return b"", state.log_end_known, []
        except errors.TidewayError:
            return b"", state.log_end_known, []  # the receivers' next read tries again (metadata is refreshed)
        return result.records, result.last_stable_offset, result.aborted_transactions


def drop_below(state: ShareState, offset: int) -> None:
    """The log holds nothing below ``offset`` now: neither does the window (nor its records' table)."""
    state.share.move_start(offset)
    records = state.records
    for old in [o for o in records if o < offset]:
        del records[old]
