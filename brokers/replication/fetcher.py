"""The follower side of replication: one fetcher task per leader broker.

A fetcher repeatedly asks its leader for every partition this broker follows
there, from each log's end offset, telling the leader the epoch of its last
batch. The answer either carries batches (appended as they are, offsets and
epochs included), or says where the follower's log diverged from the leader's
(truncate there, then fetch again), or an error (the partition moved: wait for
the controller's next state). The follower's HW is the leader's, capped at its
own log end.

Ownership: the fetcher task mutates only the logs of partitions that are
followers of its leader; the broker changes roles on the same loop between
awaits, so every partition is re-checked after each await.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from tideway_server.brokers.invariants import InvariantError
from tideway_server.brokers.replication.partition import Partition, Role

from tideway.aio import cancel_and_wait
from tideway.native.conn import Connection, connect
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.retry import Backoff

__all__ = ["ReplicaFetcher"]

log = logging.getLogger(__name__)

BACKOFF_S_MAX = 1.0


class ReplicaFetcher:
    def __init__(
        self,
        *,
        broker_id: int,
        leader_id: int,
        address: Callable[[int], tuple[str, int] | None],
        partitions: Callable[[], list[Partition]],
        on_append: Callable[[Partition], None],
        on_fetched: Callable[[Partition, int], None] = lambda partition, leader_high_watermark: None,
        credentials=None,
        ssl_context=None,
        fetch_wait_ms: int = 500,
        partition_fetch_bytes_max: int = 8 << 20,
    ) -> None:
        self.broker_id = broker_id
        self._credentials = credentials  # ClusterPeer: replica fetches go to the leader's internal listener
        self._ssl_context = ssl_context
        self.leader_id = leader_id
        self._address = address
        self._partitions = partitions
        self._on_append = on_append
        self._on_fetched = on_fetched  # after each good answer: (partition, the leader's HW)
        self.fetch_wait_ms = fetch_wait_ms
        self.partition_fetch_bytes_max = partition_fetch_bytes_max
        self._connection: Connection | None = None
        self._wakeup = asyncio.Event()
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"replica-fetcher-{self.leader_id}")

    def wake(self) -> None:
        self._wakeup.set()

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    async def _run(self) -> None:
        backoff = Backoff(initial_s=0.05, max_s=BACKOFF_S_MAX)
        while True:
            followed = self._partitions()
            if not followed:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            try:
                await self._fetch_once(followed)
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except (errors.TidewayError, OSError) as exc:
                if isinstance(exc, errors.SaslAuthenticationFailedError):
                    log.error("leader %d refused this broker's cluster credentials: %s", self.leader_id, exc)
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                log.debug("fetch from leader %d failed: %s; retrying", self.leader_id, exc)
                self._wakeup.clear()
                await backoff.wait(self._wakeup)

    async def _connect(self) -> Connection:
        if self._connection is None or self._connection.closed:
            address = self._address(self.leader_id)
            if address is None:
                raise errors.LeaderNotAvailableError(f"no address for broker {self.leader_id}")
            self._connection = await connect(*address, timeout_s=5, credentials=self._credentials, ssl_context=self._ssl_context)
        return self._connection

    async def _fetch_once(self, followed: list[Partition]) -> None:
        connection = await self._connect()
        asked = {(p.topic, p.partition): (p, p.log.log_end_offset, p.leader_epoch) for p in followed}
        request = m.FetchRequest(
            replica_id=self.broker_id,
            max_wait_ms=self.fetch_wait_ms,
            min_bytes=1,
            partitions=[
                m.FetchPartition(
                    topic=p.topic,
                    partition=p.partition,
                    fetch_offset=offset,
                    partition_max_bytes=self.partition_fetch_bytes_max,
                    current_leader_epoch=epoch,
                    last_fetched_epoch=p.log.epochs.latest_epoch,
                    log_start_offset=p.log.log_start_offset,
                )
                for p, offset, epoch in asked.values()
            ],
        )
        response: m.FetchResponse = await connection.request(ApiKey.FETCH, request, timeout_s=5 + self.fetch_wait_ms / 1000)
        stalled = True
        for result in response.partitions:
            entry = asked.get((result.topic, result.partition))
            if entry is None:
                continue
            partition, offset, epoch = entry
            # The broker may have changed this partition's role while we waited.
            if partition.role is not Role.FOLLOWER or partition.leader_id != self.leader_id or partition.leader_epoch != epoch:
                continue
            if partition.log.log_end_offset != offset:
                continue
            if self._apply(partition, result):
                stalled = False
        if stalled:
            # Every partition errored (e.g. the leader has not taken over yet): do not spin.
            await asyncio.sleep(0.05)

    def _apply(self, partition: Partition, result: m.FetchPartitionResult) -> bool:
        log_ = partition.log
        name = f"{partition.topic}-{partition.partition}"
        if result.error_code:
            error = errors.error_for_code(result.error_code, result.error_message)
            if isinstance(error, errors.OffsetOutOfRangeError) and result.log_start_offset > log_.log_end_offset:
                log.warning("%s: behind the leader's log start %d; starting over there", name, result.log_start_offset)
                # Nothing to keep below the leader's start: an empty log from there is equivalent.
                log_.start_over_at(result.log_start_offset)
                return True
            log.debug("%s: leader %d answered %s", name, self.leader_id, error)
            return False
        if result.diverging_epoch >= 0 or result.diverging_end_offset >= 0:
            self._truncate_divergent(partition, result.diverging_epoch, result.diverging_end_offset)
            return True
        if result.log_start_offset > log_.log_start_offset:
            log_.follow_start(result.log_start_offset)  # the leader deleted records (DeleteRecords, a purge)
        if result.records:
            try:
                log_.append_replicated(result.records)
            except errors.CorruptRecordError as exc:
                log.error("%s: refusing a batch from leader %d: %s", name, self.leader_id, exc)
                return False
            self._on_append(partition)
        log_.high_watermark = max(min(result.high_watermark, log_.log_end_offset), min(log_.high_watermark, log_.log_end_offset))
        if log_.high_watermark > log_.log_end_offset:
            raise InvariantError(f"{name}: high watermark {log_.high_watermark} past the log end {log_.log_end_offset}")
        self._on_fetched(partition, result.high_watermark)
        return bool(result.records)

    def _truncate_divergent(self, partition: Partition, leader_epoch: int, leader_end_offset: int) -> None:
        log_ = partition.log
        own_epoch, own_end = log_.epochs.end_offset_for(leader_epoch, log_.log_end_offset)
        target = leader_end_offset if own_epoch != leader_epoch else min(leader_end_offset, own_end)
        target = max(target, 0)
        if target < min(log_.high_watermark, log_.log_end_offset):
            # A new leader comes from the ISR, which holds every committed record: diverging below them
            # would throw committed records away.
            raise InvariantError(f"{partition.topic}-{partition.partition}: leader {self.leader_id} diverges at "
                                 f"{target}, below the high watermark {log_.high_watermark}")
        if target < log_.log_end_offset:
            log.warning(
                "%s-%d: truncating divergent records %d..%d (leader %d ends epoch %d at %d)",
                partition.topic, partition.partition, target, log_.log_end_offset - 1,
                self.leader_id, leader_epoch, leader_end_offset,
            )
            log_.truncate_to(target)
        elif log_.epochs.entries:
            # Nothing to cut, but the leader does not know our last epoch (it
            # holds no records here): forget it so the next fetch names an earlier one.
            log_.epochs.truncate_from_end(log_.epochs.entries[-1][1])
