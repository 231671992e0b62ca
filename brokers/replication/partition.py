"""One partition replica on this broker and, when it leads, its followers.

The leader assigns offsets; followers copy its batches byte for byte. The high
watermark (HW) is the smallest log end offset (LEO) over the in-sync replicas
(ISR) and only moves forward; consumers see records below it. A produce with
acks=all is answered once the HW passes its last record, which means every
ISR member has it; it is refused up front when the ISR is smaller than
``min.insync.replicas``.

Leadership changes come from the controller with a higher leader epoch. A
follower's fetch carries the epoch of its last batch; if the leader's log
ends that epoch earlier (or never had it) the follower's suffix diverged and
the answer tells it where to truncate (``diverging_epoch``).

Ownership: event-loop thread only.
"""

from __future__ import annotations

import asyncio
import enum
import heapq
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from tideway_server.brokers.invariants import InvariantError
from tideway_server.brokers.storage.log import AppendResult, Log

from tideway.protocol import errors

__all__ = ["FollowerState", "Partition", "Role"]

log = logging.getLogger(__name__)


class Role(enum.Enum):
    NONE = "none"  # no instruction from the controller yet (after a restart)
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclass
class FollowerState:
    """What the leader knows of one follower."""

    log_end_offset: int = -1  # -1: has not fetched since this leader took over
    last_caught_up_monotonic: float = 0.0
    last_fetch_monotonic: float = 0.0
    leader_end_offset_at_last_fetch: int = 0
    log_start_offset: int = -1  # as it said in its last fetch (-1: not said yet)


class Partition:
    def __init__(
        self,
        broker_id: int,
        log_: Log,
        *,
        on_high_watermark: Callable[[Partition], None] = lambda p: None,
    ) -> None:
        self.broker_id = broker_id
        self.log = log_
        self.topic = log_.topic
        self.partition = log_.partition
        self.role = Role.NONE
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.followers: dict[int, FollowerState] = {}
        self._acks_waiters: list[tuple[int, int, asyncio.Future]] = []  # heap of (last offset, seq, future)
        self._waiter_sequence = 0
        self._start_waiters: list[tuple[int, asyncio.Future]] = []  # (log start, future): delete_records
        self._on_high_watermark = on_high_watermark

    def __repr__(self) -> str:
        return f"Partition({self.topic}-{self.partition} {self.role.value} epoch={self.leader_epoch} isr={self.isr})"

    # -- role changes (from the controller) -----------------------------------------

    def make_standalone_leader(self) -> None:
        """A partition of a single broker without a controller: lead it alone."""
        self.become_leader(leader_epoch=max(self.leader_epoch, 0), partition_epoch=0, replicas=[self.broker_id], isr=[self.broker_id])

    def become_leader(self, *, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self._check_epoch(leader_epoch)
        was_leader_in_epoch = self.role is Role.LEADER and self.leader_epoch == leader_epoch
        self.role = Role.LEADER
        self.leader_id = self.broker_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        if not was_leader_in_epoch:
            now = time.monotonic()
            self.followers = {r: FollowerState(last_caught_up_monotonic=now) for r in replicas if r != self.broker_id}
            log.info("%s-%d: leader in epoch %d, ISR %s, LEO %d, HW %d", self.topic, self.partition, leader_epoch, isr, self.log.log_end_offset, self.log.high_watermark)
        else:
            for r in replicas:
                if r != self.broker_id:
                    self.followers.setdefault(r, FollowerState(last_caught_up_monotonic=time.monotonic()))
        self.maybe_advance_high_watermark()

    def become_follower(self, *, leader_id: int, leader_epoch: int, partition_epoch: int, replicas: list[int], isr: list[int]) -> None:
        self._check_epoch(leader_epoch)
        changed = self.role is not Role.FOLLOWER or self.leader_epoch != leader_epoch
        self.role = Role.FOLLOWER
        self.leader_id = leader_id
        self.leader_epoch = leader_epoch
        self.partition_epoch = partition_epoch
        self.replicas = list(replicas)
        self.isr = list(isr)
        self.followers = {}
        # The records were written here and may yet be committed by the new
        # leader: "not leader" would tell the producer it is safe to resend
        # (a duplicate), so say it is unknown, as a timeout does.
        self._fail_waiters(
            errors.RequestTimedOutError(
                f"{self.topic}-{self.partition}: leadership moved to broker {leader_id} before the records were "
                "committed; they may or may not be kept"
            )
        )
        waiters, self._start_waiters = self._start_waiters, []
        for _, future in waiters:
            if not future.done():
                future.set_exception(errors.RequestTimedOutError(
                    f"{self.topic}-{self.partition}: leadership moved to broker {leader_id} before every in-sync "
                    "replica had deleted the records; ask again"))
                future.exception()
        if changed:
            log.info("%s-%d: follower of broker %d in epoch %d, LEO %d", self.topic, self.partition, leader_id, leader_epoch, self.log.log_end_offset)

    def _check_epoch(self, leader_epoch: int) -> None:
        if leader_epoch < self.leader_epoch:  # the broker drops older states (metadata_cache.apply)
            raise InvariantError(f"{self.topic}-{self.partition}: leader epoch {leader_epoch} after "
                                 f"{self.leader_epoch}; epochs only grow")

    def update_isr(self, isr: list[int], partition_epoch: int) -> None:
        self.isr = list(isr)
        self.partition_epoch = partition_epoch
        self.maybe_advance_high_watermark()
        self._check_start_waiters()

    # -- deleting records (DeleteRecords, a queue's purge) ---------------------------------

    def delete_records(self, offset: int) -> tuple[int, asyncio.Future]:
        """Delete the records below ``offset`` (-1: the high watermark) here, and return the new log start with a
        future done once every in-sync follower has deleted them too (they learn it from their fetch answers)."""
        if self.role is not Role.LEADER:
            raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {self.topic}-{self.partition} (leader: {self.leader_id})")
        start = self.log.delete_records(self.log.high_watermark if offset == -1 else offset)
        future = asyncio.get_running_loop().create_future()
        self._start_waiters.append((start, future))
        self._check_start_waiters()
        return start, future

    def _check_start_waiters(self) -> None:
        if not self._start_waiters:
            return
        starts = [self.followers.get(r, FollowerState()).log_start_offset for r in self.isr if r != self.broker_id]
        lowest = min(starts, default=self.log.log_start_offset)
        waiting = []
        for start, future in self._start_waiters:
            if future.done():
                continue
            if lowest >= start:
                future.set_result(None)
            else:
                waiting.append((start, future))
        self._start_waiters = waiting

    # -- the leader's write path -----------------------------------------------------------

    def append_as_leader(self, data: bytearray, *, acks: int) -> tuple[AppendResult, asyncio.Future | None]:
        """Append producer batches; with acks=all also return a future for the commit."""
        if self.role is not Role.LEADER:
            raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {self.topic}-{self.partition} (leader: {self.leader_id})")
        if acks == -1:
            min_insync = self._min_insync()
            if len(self.isr) < min_insync:
                raise errors.NotEnoughReplicasError(
                    f"{self.topic}-{self.partition} has {len(self.isr)} in-sync replica(s) {self.isr}; "
                    f"min.insync.replicas is {min_insync}"
                )
        result = self.log.append(data, leader_epoch=self.leader_epoch)
        future = None
        if acks == -1:
            future = asyncio.get_running_loop().create_future()
            if result.last_offset < self.log.high_watermark:
                future.set_result(None)  # a resent batch that is already committed
            else:
                self._waiter_sequence += 1
                heapq.heappush(self._acks_waiters, (result.last_offset, self._waiter_sequence, future))
        self.maybe_advance_high_watermark()
        return result, future

    def append_marker(self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int) -> asyncio.Future:
        """End a producer's transaction here with its marker (the transaction coordinator's WRITE_TXN_MARKERS);
        the future is done once every in-sync replica has it. A marker of an older producer epoch than the
        partition has seen is refused (a fenced producer's coordinator)."""
        if self.role is not Role.LEADER:
            raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {self.topic}-{self.partition} (leader: {self.leader_id})")
        known = self.log.producers.producers.get(producer_id)
        if known is not None and producer_epoch < known.epoch:
            raise errors.InvalidProducerEpochError(
                f"a marker of producer {producer_id} epoch {producer_epoch}; the partition has seen epoch {known.epoch}")
        result = self.log.append_marker(producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch,
                                        leader_epoch=self.leader_epoch)
        future = asyncio.get_running_loop().create_future()
        self._waiter_sequence += 1
        heapq.heappush(self._acks_waiters, (result.last_offset, self._waiter_sequence, future))
        self.maybe_advance_high_watermark()
        return future

    def maybe_advance_high_watermark(self) -> bool:
        """Move the HW to the smallest LEO in the ISR; True if it moved."""
        if self.role is not Role.LEADER:
            return False
        candidate = self.log.log_end_offset
        for replica in self.isr:
            if replica == self.broker_id:
                continue
            state = self.followers.get(replica)
            if state is None or state.log_end_offset < 0:
                return False  # an ISR member we have not heard from yet holds the HW
            candidate = min(candidate, state.log_end_offset)
        if candidate <= self.log.high_watermark:
            return False
        if candidate > self.log.log_end_offset:  # the minimum over the ISR, ours included
            raise InvariantError(f"{self.topic}-{self.partition}: high watermark {candidate} past the log end "
                                 f"{self.log.log_end_offset}")
        self.log.high_watermark = candidate
        waiters = self._acks_waiters
        if waiters and waiters[0][0] < candidate:
            # Records appended while the ISR was large enough, committed once it shrank below
            # min.insync.replicas (the followers fell out before fetching them): written, but not
            # on as many replicas as acks=all promises, so not acknowledged (Kafka's
            # NOT_ENOUGH_REPLICAS_AFTER_APPEND; a producer without idempotence may resend a duplicate).
            min_insync = self._min_insync()
            short = None if len(self.isr) >= min_insync else errors.NotEnoughReplicasAfterAppendError(
                f"{self.topic}-{self.partition}: the records were written, but the in-sync replicas shrank to "
                f"{self.isr} (min.insync.replicas is {min_insync}) before they were copied")
            while waiters and waiters[0][0] < candidate:
                _, _, future = heapq.heappop(waiters)
                if not future.done():
                    if short is None:
                        future.set_result(None)
                    else:
                        future.set_exception(short)
        self._on_high_watermark(self)
        return True

    def _min_insync(self) -> int:
        """min.insync.replicas, capped at the replica count (a topic of fewer replicas can still take acks=all)."""
        return min(self.log.config.min_insync_replicas, len(self.replicas) or 1)

    def _fail_waiters(self, exc: Exception) -> None:
        waiters, self._acks_waiters = self._acks_waiters, []
        for _, _, future in waiters:
            if not future.done():
                future.set_exception(exc)
                future.exception()

    # -- the leader's side of follower fetches ---------------------------------------------

    def check_leader_epoch(self, current_leader_epoch: int) -> None:
        """Raise unless this replica leads in ``current_leader_epoch`` (-1: any epoch), as the asker believes."""
        if self.role is not Role.LEADER:
            raise errors.NotLeaderError(f"broker {self.broker_id} does not lead {self.topic}-{self.partition}")
        if current_leader_epoch >= 0 and current_leader_epoch < self.leader_epoch:
            raise errors.FencedLeaderEpochError(f"epoch {current_leader_epoch} is older than the leader's {self.leader_epoch}")
        if current_leader_epoch > self.leader_epoch:
            raise errors.UnknownLeaderEpochError(f"epoch {current_leader_epoch} is newer than the leader's {self.leader_epoch}")

    def check_follower_fetch(self, replica_id: int, current_leader_epoch: int) -> None:
        """Raise unless ``replica_id`` may fetch from this leader in this epoch."""
        self.check_leader_epoch(current_leader_epoch)
        if replica_id not in self.replicas:
            raise errors.NotLeaderError(f"broker {replica_id} is not a replica of {self.topic}-{self.partition}")

    def diverging_epoch(self, last_fetched_epoch: int, fetch_offset: int) -> tuple[int, int] | None:
        """(epoch, end offset) the follower must truncate to, or None if its log agrees."""
        if last_fetched_epoch < 0:
            return None
        epoch, end_offset = self.log.epochs.end_offset_for(last_fetched_epoch, self.log.log_end_offset)
        if epoch != last_fetched_epoch or end_offset < fetch_offset:
            return epoch, end_offset
        return None

    def record_follower_fetch(self, replica_id: int, fetch_offset: int, log_start_offset: int = -1) -> None:
        """A follower asked for ``fetch_offset``: it holds everything below it, from ``log_start_offset``."""
        state = self.followers.get(replica_id)
        if state is None:
            return
        now = time.monotonic()
        state.log_end_offset = fetch_offset
        if log_start_offset != state.log_start_offset:
            state.log_start_offset = log_start_offset
            self._check_start_waiters()
        state.last_fetch_monotonic = now
        # Caught up: it has everything this leader had when it fetched last time
        # (Kafka's definition; a follower never equals a moving LEO exactly).
        if fetch_offset >= self.log.log_end_offset or fetch_offset >= state.leader_end_offset_at_last_fetch:
            state.last_caught_up_monotonic = now
        state.leader_end_offset_at_last_fetch = self.log.log_end_offset
        self.maybe_advance_high_watermark()

    def lagging_replicas(self, lag_time_max_s: float) -> list[int]:
        """ISR followers that have not caught up for longer than the limit."""
        now = time.monotonic()
        return [
            r for r in self.isr
            if r != self.broker_id and now - self.followers.get(r, FollowerState()).last_caught_up_monotonic > lag_time_max_s
        ]

    def caught_up_outside_isr(self, lag_time_max_s: float) -> list[int]:
        """Followers outside the ISR that fetch now and hold everything up to the HW in this epoch.

        A follower that stopped fetching (dead, or fenced by the controller) is
        not proposed, however far it had got.
        """
        start_of_epoch = self.log.epochs.entries[-1][1] if self.log.epochs.entries else 0
        now = time.monotonic()
        return [
            r for r, state in self.followers.items()
            if r not in self.isr
            and now - state.last_fetch_monotonic <= lag_time_max_s
            and state.log_end_offset >= max(self.log.high_watermark, start_of_epoch)
        ]
