"""What a coordinator holds of its queue groups: one ``ShareState`` per (group, topic, partition), loaded or not.

A share-partition is **loaded** (its ``SharePartition`` state machine and the payloads of its window in memory)
while receivers use it, and **restored but not loaded** (only the snapshot its state log replays to) after a
failover or when it sat idle (``unload_idle``); ``load`` makes a restored one loaded again. Receivers of a
(group, topic) wait on one ``Signal``, which whatever makes records deliverable sets (``wake``, ``on_data``).

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from tideway_server.brokers.queues.share_partition import QueueSettings, SharePartition, State
from tideway_server.brokers.queues.state_log import StateLog
from tideway_server.brokers.storage import TopicConfig

from tideway.aio import Signal
from tideway.protocol import messages as m
from tideway.record.batch import Record

if TYPE_CHECKING:
    from tideway_server.brokers.replication import Partition

log = logging.getLogger(__name__)


def settings_of(config: TopicConfig) -> QueueSettings:
    return QueueSettings(
        visibility_timeout_ms=config.visibility_timeout_ms,
        max_deliveries=config.max_deliveries,
        retry_backoff_ms=config.retry_backoff_ms,
        retry_backoff_max_ms=config.retry_backoff_max_ms,
        fifo=config.is_fifo,
        max_in_flight=config.max_in_flight,
    )


def now_ms() -> int:
    return int(time.time() * 1000)


class Coordinator(Protocol):
    """What the queue service needs of the group coordinator it runs on (``brokers.groups.coordinator``)."""

    def check_coordinator(self, group_id: str) -> int:
        """The internal partition of ``group_id``; raises unless this broker coordinates it (and has loaded it)."""

    async def set_type(self, index: int, group_id: str, group_type: str) -> None:
        """Record that ``group_id`` is a queue group (refused if it is a stream group)."""

    def topic_config(self, topic: str) -> TopicConfig:
        """The settings of ``topic`` (UnknownTopicOrPartitionError if there is none)."""

    async def write(self, index: int, records: list[tuple[list, object]]) -> None:
        """Append state records to internal partition ``index``; return once every in-sync replica has them."""

    def local_partition(self, topic: str, partition: int) -> Partition | None:
        """This broker's replica of ``topic``-``partition``, if it holds one."""


@dataclass(eq=False)
class ShareState:
    """A loaded share-partition: its state machine, its window's records, and its writes and reads."""

    group_id: str
    topic: str
    partition: int
    share: SharePartition
    state_log: StateLog
    records: dict[int, Record] = field(default_factory=dict)
    version: int = 0  # bumped on every change a consumer may be told about
    taken: int = 0  # the version whose changes the latest write carries
    persisted: int = 0  # the version replicated
    writes: list[tuple[int, asyncio.Future]] = field(default_factory=list)  # in flight: (version, done)
    reading: asyncio.Lock = field(default_factory=asyncio.Lock)
    log_end_known: int = -1  # the leader's high watermark at the last read
    log_start_checked: float = 0.0  # when a remote leader was last asked for its log start (window.follow_log_start)
    watching: asyncio.Task | None = None  # a long-polling fetch from a remote leader (remote_leaders.py)
    acquisitions_to_write: bool = False  # a write of acquisitions is due (persistence.StateWriter.write_soon)
    used: float = field(default_factory=time.monotonic)  # the last receive or acknowledgement (see unload_idle)

    @property
    def key(self) -> tuple[str, str, int]:
        return self.group_id, self.topic, self.partition

    def unloadable(self) -> bool:
        """Nothing in flight, nothing to write or dead-letter, nobody reading: the state log holds it all."""
        share = self.share
        return (not share.in_flight and not share.restored and not share.dead_lettering() and not self.writes
                and self.persisted == self.version and not self.acquisitions_to_write and self.watching is None
                and not self.reading.locked())

    def drop(self) -> None:
        """It leaves this broker: whoever waits on its writes or watch finds it gone."""
        for _version, done in self.writes:
            done.cancel()
        if self.watching is not None:
            self.watching.cancel()


class HeldShares:
    """The share-partitions held here, loaded (``loaded``) or restored only (``restored``), and their waiters."""

    def __init__(self) -> None:
        self.loaded: dict[tuple[str, str, int], ShareState] = {}
        self.restored: dict[tuple[str, str, int], dict] = {}  # replayed state logs, with "seq" (see restore)
        self._changed: dict[tuple[str, str], Signal] = {}
        self._round_robin: dict[tuple[str, str], int] = {}

    def holds(self, state: ShareState) -> bool:
        """Whether ``state`` is still the loaded one of its key (not unloaded, dropped or replaced)."""
        return self.loaded.get(state.key) is state

    # -- loading and unloading -------------------------------------------------------------------

    def restore(self, group_id: str, topic: str, partition: int, snapshot: dict, seq: int) -> None:
        """A share-partition's state as its log says (``state_log.replay``), up to write ``seq``."""
        self.restored[(group_id, topic, partition)] = {**snapshot, "seq": seq}

    async def load(self, group_id: str, topic: str, partition: int, settings: QueueSettings,
                   log_start: Callable[[str, int], Awaitable[int]]) -> ShareState:
        """The loaded share-partition, from its snapshot if it has one, else new at the log's start."""
        key = (group_id, topic, partition)
        found = self.loaded.get(key)
        if found is not None:
            found.share.settings = settings
            found.used = time.monotonic()
            return found
        snapshot = self.restored.pop(key, None)
        state_log = StateLog(group_id, topic, partition)
        if snapshot is not None:
            share = SharePartition.restore(snapshot, settings)
            state_log.start_after(snapshot["seq"])
        else:
            # A new queue group starts at the oldest record the partition still has.
            share = SharePartition(await log_start(topic, partition), settings)
        return self.loaded.setdefault(key, ShareState(group_id, topic, partition, share, state_log))

    def forget_topic(self, topic: str) -> list[tuple[str, int, int]]:
        """``topic`` was deleted: drop its share-partitions (loaded or not); (group, partition, writes numbered so
        far: which state-log slots hold something) of each dropped."""
        dropped = []
        for key in [k for k in (*self.loaded, *self.restored) if k[1] == topic]:
            seq = 0
            state = self.loaded.pop(key, None)
            if state is not None:
                seq = state.state_log.seq
                state.drop()
            restored = self.restored.pop(key, None)
            if restored is not None:
                seq = max(seq, restored["seq"])
            dropped.append((key[0], key[2], seq))
        for key in [k for k in self._changed if k[1] == topic]:
            self._changed.pop(key).set()  # receivers waiting on it look again (and find the topic gone)
            self._round_robin.pop(key, None)
        return dropped

    def unload_group(self, group_id: str) -> None:
        for key in [k for k in self.loaded if k[0] == group_id]:
            self.loaded.pop(key).drop()
        for key in [k for k in self.restored if k[0] == group_id]:
            del self.restored[key]

    def unload_idle(self, unused_since: float) -> int:
        """Unload share-partitions unused since ``unused_since`` (monotonic) with nothing outstanding.

        What stays is the snapshot a failover would replay (the start offset and
        rows of records delivered before): the window's records and their table
        go, and ``load`` restores it on the next receive or acknowledgement.
        A hosted broker carries many idle groups; each costs a few hundred bytes
        so, not its last window. Returns how many were unloaded.
        """
        unloaded = 0
        for key, state in list(self.loaded.items()):
            if state.used < unused_since and state.unloadable():
                del self.loaded[key]
                self.restored[key] = {**state.share.snapshot(), "seq": state.state_log.seq}
                unloaded += 1
        if unloaded:
            log.debug("unloaded %d idle share-partition(s)", unloaded)
        return unloaded

    # -- receivers waiting -------------------------------------------------------------------------

    def signal(self, group_id: str, topic: str) -> Signal:
        """What receivers of (group, topic) wait on."""
        key = (group_id, topic)
        event = self._changed.get(key)
        if event is None:
            event = self._changed[key] = Signal()
        return event

    def wake(self, group_id: str, topic: str) -> None:
        event = self._changed.get((group_id, topic))
        if event is not None:
            event.set()

    def on_data(self, topic: str) -> None:
        """New records in a local partition of ``topic``: wake waiting receivers."""
        for (_group, waiting_topic), event in self._changed.items():
            if waiting_topic == topic:
                event.set()

    def next_start(self, group_id: str, topic: str) -> int:
        """Where the next receive of (group, topic) starts its round of partitions (turn by turn)."""
        key = (group_id, topic)
        start = self._round_robin.get(key, 0)
        self._round_robin[key] = start + 1
        return start

    # -- views -----------------------------------------------------------------------------------------

    def held(self) -> tuple[int, int, int]:
        """(share-partitions loaded, unloaded or not loaded yet, records in the loaded windows), for metrics."""
        return len(self.loaded), len(self.restored), sum(s.share.window_records for s in self.loaded.values())

    def positions(self) -> dict[str, list[tuple[str, int, int, int]]]:
        """Per queue group held here: (topic, partition, oldest record not yet accepted or dead-lettered, records in
        flight), one pass."""
        out: dict[str, list[tuple[str, int, int, int]]] = {}
        for (group_id, topic, partition), state in self.loaded.items():
            out.setdefault(group_id, []).append((topic, partition, state.share.start_offset, state.share.in_flight))
        for (group_id, topic, partition), snapshot in self.restored.items():
            in_flight = sum(1 for row in snapshot["entries"] if row[1] == State.ACQUIRED)
            out.setdefault(group_id, []).append((topic, partition, snapshot["start"], in_flight))
        return out

    def describe(self, group_id: str) -> list[m.SharePartitionDescription]:
        now = now_ms()
        out = []
        for (g, topic, partition), state in self.loaded.items():
            if g == group_id:
                out.append(_description(topic, partition, state.share.start_offset, state.share.end_offset,
                                        state.share.counts(now)))
        for (g, topic, partition), snapshot in self.restored.items():
            if g == group_id:
                # Not loaded (idle, or not received from since a failover): what its snapshot says; the
                # window is read again on the next receive.
                counts = SharePartition.restore(snapshot, QueueSettings()).counts(now)
                out.append(_description(topic, partition, snapshot["start"], snapshot["start"], counts))
        out.sort(key=lambda d: (d.topic, d.partition))
        return out


def _description(topic: str, partition: int, start: int, read: int, counts: dict) -> m.SharePartitionDescription:
    return m.SharePartitionDescription(
        topic=topic, partition=partition, start_offset=start, read_offset=read, available=counts["available"],
        delayed=counts["delayed"], in_flight=counts["in_flight"], dead_lettering=counts["dead_lettering"])
