"""Repairing a replica that holds a batch failing its CRC.

Such a batch is found by a read (a consumer's or a follower's fetch), by the
scrubber, or when a log is loaded. It is never served: the read stops before
it, or answers KAFKA_STORAGE_ERROR (retriable: clients look for the leader
again). What happens next depends on the replica:

* **Nothing else holds the records** (a topic with one replica, or a
  standalone broker): the batch stays refused and the log says so; only a
  backup can bring it back.
* **A follower**, or a replica without a role yet (at start): it truncates its
  log to the last intact batch at once and asks the controller to take it
  out of the ISR (``REPLICA_DAMAGED``); its fetcher copies the rest from the
  leader again. It is repaired when its log end reaches the leader's high
  watermark. Until then it cannot lead (it is out of the ISR) and its leader
  does not re-admit it (it is behind).
* **A leader**: it asks the controller to move the leadership to a healthy
  in-sync replica; once it is a follower it truncates and refetches as above.
  If no other in-sync replica is alive the controller says so and the
  partition stays where it is, refusing the batch.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from tideway_server.brokers.replication import Partition, Role
from tideway_server.brokers.server.metrics import BrokerMetrics
from tideway_server.brokers.storage import Log

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.retry import Backoff

__all__ = ["ReplicaRepair"]

log = logging.getLogger(__name__)

Report = Callable[[m.ReplicaDamagedRequest], Awaitable[m.ReplicaDamagedResponse]]
REPORT_BACKOFF_S_MAX = 2.0


class ReplicaRepair:
    def __init__(self, broker_id: int, partitions: dict[tuple[str, int], Partition], metrics: BrokerMetrics,
                 report: Report | None) -> None:
        self.broker_id = broker_id
        self._partitions = partitions
        self._metrics = metrics
        self._report = report  # None: no controller, so no other replica to repair from
        self.pending: dict[tuple[str, int], int] = {}  # partition -> first offset to copy again from the leader
        self._refused: set[tuple[str, int, int]] = set()  # unrepairable batches already logged
        self._reports: dict[tuple[str, int], asyncio.Task] = {}

    def on_corruption(self, log_: Log, offset: int, reason: str) -> None:
        key = (log_.topic, log_.partition)
        self._metrics.corrupt_batches.labels(log_.topic).inc()
        if self._report is None or log_.config.replication_factor <= 1:
            if (*key, offset) not in self._refused:
                self._refused.add((*key, offset))
                log.error("%s-%d: the batch at offset %d is damaged (%s) and no other replica holds it: it is "
                          "refused to readers; restore it from a backup", *key, offset, reason)
            return
        known = self.pending.get(key)
        if known is not None and known <= offset:
            return  # already being repaired from there
        self.pending[key] = offset
        partition = self._partitions.get(key)
        leading = partition is not None and partition.role is Role.LEADER
        log.error("%s-%d: corrupt data from offset %d (%s): %s", *key, offset, reason,
                  "asking the controller to move the leadership, then copying it again from the new leader" if leading
                  else "truncating there and copying it again from the leader")
        if not leading:
            self._truncate(log_, offset)
        self._send_report(key, offset, reason)

    def on_role_change(self, partition: Partition) -> None:
        """A damaged replica changed role: a follower truncates now; a leader asks again to step down."""
        key = (partition.topic, partition.partition)
        offset = self.pending.get(key)
        if offset is None:
            return
        if partition.role is Role.FOLLOWER:
            self._truncate(partition.log, offset)
        elif partition.role is Role.LEADER:
            self._send_report(key, offset, "still damaged when made leader")

    def on_fetched(self, partition: Partition, leader_high_watermark: int) -> None:
        """The fetcher appended from the leader: a damaged replica that caught up is repaired."""
        key = (partition.topic, partition.partition)
        if key in self.pending and partition.log.log_end_offset >= leader_high_watermark:
            offset = self.pending.pop(key)
            self._metrics.replica_repairs.labels(partition.topic).inc()
            log.warning("%s-%d: repaired: copied offsets %d..%d again from leader %d", *key, offset,
                        partition.log.log_end_offset - 1, partition.leader_id)

    def forget(self, topic: str) -> None:
        for key in [key for key in self.pending if key[0] == topic]:
            del self.pending[key]

    def _truncate(self, log_: Log, offset: int) -> None:
        if log_.log_end_offset > offset:
            log.warning("%s-%d: truncating offsets %d..%d to copy them again", log_.topic, log_.partition, offset,
                        log_.log_end_offset - 1)
            log_.truncate_to(offset)

    def _send_report(self, key: tuple[str, int], offset: int, reason: str) -> None:
        task = self._reports.get(key)
        if task is not None and not task.done():
            return
        self._reports[key] = asyncio.get_running_loop().create_task(self._report_until_answered(key, offset, reason))

    async def _report_until_answered(self, key: tuple[str, int], offset: int, reason: str) -> None:
        backoff = Backoff(initial_s=0.1, max_s=REPORT_BACKOFF_S_MAX)
        while key in self.pending:
            request = m.ReplicaDamagedRequest(broker_id=self.broker_id, broker_epoch=-1, topic=key[0],
                                              partition=key[1], offset=offset, reason=reason[:500])
            try:
                response = await self._report(request)
            except errors.NotEnoughReplicasError as exc:
                log.error("%s", exc)
                return
            except errors.UnknownTopicOrPartitionError:
                self.pending.pop(key, None)
                return
            except (errors.TidewayError, OSError) as exc:
                log.info("%s-%d: could not tell the controller about the damage yet (%s); retrying", *key, exc)
                await backoff.wait()
                continue
            state = response.state
            if state is not None:
                log.info("%s-%d: the controller took this broker out of the ISR (now %s, leader %d)", *key,
                         state.isr, state.leader)
            return
