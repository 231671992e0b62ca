"""The state of one queue group on one partition (Kafka's share-partition, KIP-932).

Records of the partition move through these states, per group::

    AVAILABLE --acquire--> ACQUIRED --accept--> ACCEPTED (done)
        ^                     |  \\--reject, or release/expiry at the delivery limit--> DEAD_LETTERING --> DEAD (done)
        +--release/expiry-----+

The *window* is ``[start_offset, end_offset)``: every record below
``start_offset`` is done, ``end_offset`` is the next offset to read from the
log. Only the state machine lives here: reading records, writing the
dead-letter topic and persisting snapshots are the queue service's job
(``brokers/queues/service.py``). Times are wall-clock milliseconds because
locks and delays must mean the same thing on the broker that takes over.

A delivery is named by (offset, delivery count): the receipt. An
acknowledgement is valid only while that delivery holds the lock, so a worker
whose lock expired (and whose record went to another worker) cannot
acknowledge it.

Ownership: the event-loop thread of the coordinator that leads the group.
"""

from __future__ import annotations

import enum
import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import msgspec
from tideway_server.brokers.invariants import InvariantError

from tideway.protocol.errors import InvalidRecordStateError

__all__ = ["Acquired", "QueueSettings", "SharePartition", "State"]

MAX_LOCK_MS = 12 * 3600 * 1000  # a lock can be extended up to 12 hours from now
_NEVER = 1 << 62


class State(enum.IntEnum):
    AVAILABLE = 0
    ACQUIRED = 1
    ACCEPTED = 2
    DEAD_LETTERING = 3  # to be written to the dead-letter topic
    DEAD = 4  # written to the dead-letter topic


_DONE = (State.ACCEPTED, State.DEAD)


@dataclass(frozen=True)
class QueueSettings:
    visibility_timeout_ms: int = 30_000
    max_deliveries: int = 5
    retry_backoff_ms: int = 1_000
    retry_backoff_max_ms: int = 60_000
    fifo: bool = False
    max_in_flight: int = 1_000


class Entry(msgspec.Struct, gc=False):
    """One record's state in the window. A msgspec Struct: built in C, because
    the window makes one per record read (a class with ``__init__`` cost three
    times as much); ``gc=False`` is safe, it holds only ints, str and bytes."""

    available_at: int
    key: bytes | None = None
    state: State = State.AVAILABLE
    count: int = 0
    deadline: int = 0
    first_ms: int = 0
    last_ms: int = 0
    error: str = ""

    def to_list(self, offset: int) -> list:
        return [offset, int(self.state), self.count, self.available_at, self.deadline, self.first_ms, self.last_ms, self.error]

    @classmethod
    def from_list(cls, row: list) -> tuple[int, Entry]:
        offset, state, count, available_at, deadline, first_ms, last_ms, error = row
        return offset, cls(available_at, None, State(state), count, deadline, first_ms, last_ms, error)


class Acquired(msgspec.Struct, frozen=True, gc=False):
    """One record locked by ``acquire``: its receipt and the lock's deadline."""

    offset: int
    delivery_count: int
    lock_deadline_ms: int


class SharePartition:
    def __init__(
        self, start_offset: int, settings: QueueSettings, *, jitter: Callable[[], float] = random.random
    ) -> None:
        self.settings = settings
        self.start_offset = start_offset
        self.end_offset = start_offset
        # Records read from the log and not yet done, in ascending offset order. An OrderedDict
        # because done records leave from the front: a dict's first key is found by walking over
        # the slots of every key deleted before it.
        self.entries: OrderedDict[int, Entry] = OrderedDict()
        # Non-trivial state restored from a snapshot for records not read again yet.
        self.restored: dict[int, Entry] = {}
        self.in_flight = 0
        self._jitter = jitter
        # No lock expires before this (a lower bound: extending a lock leaves it as it is), and
        # False when certainly no record waits to be dead-lettered: both spare walks of the window.
        self._expiry_floor = 0
        self._maybe_dead_lettering = False
        self._delay_floor = 0  # no delayed record becomes available before this (a lower bound)
        self._none_available_below = 0  # no record below this offset is available (locked, done...)
        # For the state log (see ``changes``): offsets whose state changed since the last call, and
        # the start offset as last logged.
        self.changed: set[int] = set()
        self._start_logged = -1

    # -- the log side ---------------------------------------------------------------

    def add_records(self, records: Iterable[tuple[int, bytes | None, int]], end_offset: int) -> None:
        """Records read from the log: (offset, key, available_at); ``end_offset`` is where reading stopped."""
        entries, restored, end, make = self.entries, self.restored, self.end_offset, Entry
        for offset, key, available_at in records:
            if offset < end:
                continue
            entry = restored.pop(offset, None) if restored else None
            if entry is None:
                entries[offset] = make(available_at, key)
                if available_at and available_at < self._delay_floor:
                    self._delay_floor = available_at
            else:
                entry.key = key
                entries[offset] = entry
        if end_offset > self.end_offset:
            self.end_offset = end_offset
            # Restored state of records the log no longer has (compacted away) is moot.
            for offset in [o for o in self.restored if o < end_offset]:
                entry = self.restored.pop(offset)
                if entry.state is State.ACQUIRED:
                    self.in_flight -= 1
        self.advance_start()

    def move_start(self, offset: int) -> None:
        """The log no longer holds records below ``offset`` (retention): forget them."""
        if offset <= self.start_offset:
            return
        for old in [o for o in self.entries if o < offset]:
            if self.entries.pop(old).state is State.ACQUIRED:
                self.in_flight -= 1
        for old in [o for o in self.restored if o < offset]:
            if self.restored.pop(old).state is State.ACQUIRED:
                self.in_flight -= 1
        self.start_offset = offset
        self.end_offset = max(self.end_offset, offset)

    @property
    def window_records(self) -> int:
        return len(self.entries)

    def advance_start(self) -> None:
        """Move the start past the records done at the front of the window."""
        entries = self.entries
        while entries:
            offset = next(iter(entries))
            if entries[offset].state in _DONE:
                del entries[offset]
                continue
            self.start_offset = offset
            return
        # An emptied dict keeps the table it grew to (a window of 20,000 records: about a MiB);
        # an idle group gives that back.
        self.entries = OrderedDict()
        self.start_offset = min(self.end_offset, min(self.restored, default=self.end_offset))

    # -- consumers ------------------------------------------------------------------------

    def acquire(self, now: int, max_records: int, lock_ms: int | None = None) -> list[Acquired]:
        """Lock up to ``max_records`` deliverable records, in offset order."""
        if self.restored:
            return []  # the window must be read again first (FIFO needs every key)
        lock_ms = self.settings.visibility_timeout_ms if lock_ms is None else min(lock_ms, MAX_LOCK_MS)
        cap = self.settings.max_in_flight
        out: list[Acquired] = []
        entries = self.entries
        first = max(self._none_available_below, self.start_offset)
        if not self.settings.fifo and self.end_offset - first <= 2 * len(entries) + 1_000:
            # Start past the records known not to be available (the locked ones, mostly), walking
            # offsets rather than the dict (whose iteration cannot start in the middle).
            # The lock of ``_lock`` inlined: this loop runs once per record delivered.
            offset, end = first, self.end_offset
            take = min(max_records, cap - self.in_flight)
            held_back = None  # the first available record not taken (delayed)
            available, acquired = State.AVAILABLE, State.ACQUIRED
            deadline = now + lock_ms
            changed, append, make = self.changed, out.append, Acquired
            while offset < end and len(out) < take:
                entry = entries.get(offset)
                if entry is not None and entry.state is available:
                    if entry.available_at <= now:
                        entry.state = acquired
                        entry.count = count = entry.count + 1
                        entry.deadline = deadline
                        if not entry.first_ms:
                            entry.first_ms = now
                        entry.last_ms = now
                        changed.add(offset)
                        append(make(offset, count, deadline))
                    elif held_back is None:
                        held_back = offset
                offset += 1
            if out:
                self.in_flight += len(out)
                if deadline < self._expiry_floor:
                    self._expiry_floor = deadline
            self._none_available_below = offset if held_back is None else held_back
            return out
        busy_keys: set[bytes] = set()
        for offset, entry in entries.items():
            if len(out) >= max_records or self.in_flight >= cap:
                break
            state = entry.state
            if state in _DONE:
                continue
            if entry.key is not None and self.settings.fifo:
                # Only the first unfinished record of a key may be delivered.
                if entry.key in busy_keys:
                    continue
                busy_keys.add(entry.key)
            if state is State.AVAILABLE and entry.available_at <= now:
                self._lock(entry, offset, now, lock_ms, out)
        return out

    def _lock(self, entry: Entry, offset: int, now: int, lock_ms: int, out: list[Acquired]) -> None:
        if entry.state is not State.AVAILABLE:  # a record is held by one receiver at a time
            raise InvariantError(f"locking offset {offset}, which is {entry.state.name.lower()}")
        entry.state = State.ACQUIRED
        entry.count += 1
        entry.deadline = now + lock_ms
        if entry.deadline < self._expiry_floor:
            self._expiry_floor = entry.deadline
        if not entry.first_ms:
            entry.first_ms = now
        entry.last_ms = now
        self.in_flight += 1
        self.changed.add(offset)
        out.append(Acquired(offset, entry.count, entry.deadline))

    def accept(self, offset: int, delivery_count: int, now: int, *, advance: bool = True) -> None:
        """Done. With ``advance=False`` the start moves at the next ``advance_start()`` (once for many accepts)."""
        entry = self._held(offset, delivery_count, now)
        entry.state = State.ACCEPTED
        self.in_flight -= 1
        if advance:
            self.advance_start()

    def accept_range(self, first: int, last: int, delivery_count: int, now: int) -> list[tuple[int, InvalidRecordStateError]]:
        """``accept(offset, delivery_count, now, advance=False)`` for each offset from ``first`` to ``last``.

        Returns the offsets that could not be accepted, each with why; the
        others are. One loop without a call per record: this is what a worker
        acknowledging every message on its own costs the broker.
        """
        failed: list[tuple[int, InvalidRecordStateError]] = []
        entries, changed = self.entries, self.changed
        acquired, accepted_state = State.ACQUIRED, State.ACCEPTED
        accepted = 0
        for offset in range(first, last + 1):
            entry = entries.get(offset)
            if entry is not None and entry.state is acquired and entry.count == delivery_count and entry.deadline > now:
                entry.state = accepted_state
                accepted += 1
                continue
            try:  # restored after a failover, or not acceptable: the one-by-one path says which
                self.accept(offset, delivery_count, now, advance=False)
            except InvalidRecordStateError as exc:
                failed.append((offset, exc))
        # Once for the range (a refused offset's row, if any, states what it already was).
        changed.update(range(first, last + 1))
        self.in_flight -= accepted
        return failed

    def release(self, offset: int, delivery_count: int, now: int, *, delay_ms: int | None = None, error: str = "") -> bool:
        """Give the record back for redelivery; True if it goes to the dead-letter topic instead."""
        entry = self._held(offset, delivery_count, now)
        if error:
            entry.error = error
        return self._unlock(entry, offset, now, self._backoff_ms(entry.count) if delay_ms is None else max(0, delay_ms))

    def reject(self, offset: int, delivery_count: int, now: int, *, error: str = "") -> None:
        entry = self._held(offset, delivery_count, now)
        entry.error = error or "rejected by the consumer"
        entry.state = State.DEAD_LETTERING
        self._maybe_dead_lettering = True
        self.in_flight -= 1

    def extend(self, offset: int, delivery_count: int, now: int, lock_ms: int) -> int:
        """Move the lock's deadline to ``now + lock_ms`` (at most 12 h); return the deadline."""
        entry = self._held(offset, delivery_count, now)
        entry.deadline = now + max(0, min(lock_ms, MAX_LOCK_MS))
        self._expiry_floor = min(self._expiry_floor, entry.deadline)
        return entry.deadline

    def expire(self, now: int) -> bool:
        """Unlock every record whose lock ran out; True if anything changed."""
        if not self.in_flight or now < self._expiry_floor:
            return False
        changed = False
        floor = None
        for source in (self.entries, self.restored):
            for offset, entry in source.items():
                if entry.state is State.ACQUIRED:
                    if entry.deadline <= now:
                        if not entry.error:
                            entry.error = "visibility timeout expired"
                        self._unlock(entry, offset, now, 0)
                        self.changed.add(offset)
                        changed = True
                    elif floor is None or entry.deadline < floor:
                        floor = entry.deadline
        self._expiry_floor = floor if floor is not None else now + MAX_LOCK_MS
        return changed

    def _unlock(self, entry: Entry, offset: int, now: int, delay_ms: int) -> bool:
        if entry.state is not State.ACQUIRED or self.in_flight <= 0:
            raise InvariantError(f"unlocking offset {offset}, which is {entry.state.name.lower()}, with "
                                 f"{self.in_flight} in flight")
        self.in_flight -= 1
        if entry.count >= self.settings.max_deliveries:
            entry.state = State.DEAD_LETTERING
            self._maybe_dead_lettering = True
            return True
        entry.state = State.AVAILABLE
        if offset < self._none_available_below:
            self._none_available_below = offset
        entry.available_at = now + delay_ms
        if delay_ms and entry.available_at < self._delay_floor:
            self._delay_floor = entry.available_at
        return False

    def _held(self, offset: int, delivery_count: int, now: int) -> Entry:
        entry = self.entries.get(offset)
        if entry is None:
            entry = self.restored.get(offset)
        if entry is None or entry.state is not State.ACQUIRED:
            state = "done or unknown" if entry is None else entry.state.name.lower()
            raise InvalidRecordStateError(f"offset {offset} is not locked (it is {state})")
        if entry.count != delivery_count:
            raise InvalidRecordStateError(
                f"offset {offset} was redelivered (delivery {entry.count}); this receipt is for delivery {delivery_count}"
            )
        if entry.deadline <= now:
            raise InvalidRecordStateError(f"the lock on offset {offset} expired {now - entry.deadline} ms ago")
        self.changed.add(offset)  # every caller changes it
        return entry

    def _backoff_ms(self, delivery_count: int) -> int:
        base = self.settings.retry_backoff_ms
        if base <= 0:
            return 0
        ceiling = min(self.settings.retry_backoff_max_ms, base << min(delivery_count - 1, 30))
        # "Equal jitter": half the delay for sure, the other half at random.
        return int(ceiling / 2 + self._jitter() * ceiling / 2)

    # -- dead letters -------------------------------------------------------------------------

    def dead_lettering(self) -> list[int]:
        """Offsets waiting to be written to the dead-letter topic."""
        if not self._maybe_dead_lettering:
            return []
        offsets = [o for o, e in self.entries.items() if e.state is State.DEAD_LETTERING]
        if not offsets and not any(e.state is State.DEAD_LETTERING for e in self.restored.values()):
            self._maybe_dead_lettering = False
        return offsets

    def dead_lettered(self, offset: int) -> None:
        entry = self.entries.get(offset)
        if entry is not None and entry.state is State.DEAD_LETTERING:
            entry.state = State.DEAD
            self.changed.add(offset)
            self.advance_start()

    def check(self) -> None:
        """Every invariant of the window at once (walks it all: for tests, not the hot path)."""
        locked = sum(1 for source in (self.entries, self.restored) for e in source.values() if e.state is State.ACQUIRED)
        if locked != self.in_flight:
            raise InvariantError(f"{locked} records locked, {self.in_flight} counted in flight")
        if self.entries.keys() & self.restored.keys():
            raise InvariantError(f"offsets both read and restored: {sorted(self.entries.keys() & self.restored.keys())}")
        if not self.start_offset <= self.end_offset:
            raise InvariantError(f"the window starts at {self.start_offset}, after its end {self.end_offset}")
        outside = [o for o in self.entries if not self.start_offset <= o < self.end_offset]
        if outside:
            raise InvariantError(f"records outside the window [{self.start_offset}, {self.end_offset}): {outside[:5]}")

    def entry(self, offset: int) -> Entry | None:
        return self.entries.get(offset) or self.restored.get(offset)

    # -- when something becomes possible -------------------------------------------------------

    def next_due(self, now: int) -> int | None:
        """The earliest time after ``now`` a lock expires or a delayed record becomes available.

        Records available now but held back (the in-flight cap, a busy FIFO key)
        wait for an acknowledgement instead, which wakes receivers. The window
        is walked only when the known earliest delay has passed.
        """
        if self._delay_floor <= now:
            self._delay_floor = min(
                (e.available_at for e in self.entries.values() if e.state is State.AVAILABLE and e.available_at > now), default=_NEVER
            )
        due = self._delay_floor
        if self.in_flight:
            due = min(due, max(self._expiry_floor, now + 1))
        return None if due >= _NEVER else due

    def counts(self, now: int) -> dict[str, int]:
        out = {"available": 0, "delayed": 0, "in_flight": self.in_flight, "dead_lettering": 0}
        for entry in (*self.entries.values(), *self.restored.values()):
            if entry.state is State.AVAILABLE:
                out["available" if entry.available_at <= now else "delayed"] += 1
            elif entry.state is State.DEAD_LETTERING:
                out["dead_lettering"] += 1
        return out

    # -- persistence ------------------------------------------------------------------------------

    def changes(self) -> tuple[int | None, list[list], list[int]]:
        """What to write to the state log since the last call: (start, rows, deleted offsets).

        The state log holds the start offset and one row per record whose state
        matters (locked, done above the start, or delivered before); applying
        each call's answer in order to the log gives what ``snapshot`` would
        (``restore`` reads either). ``start`` is None when it has not moved.
        Rows below the start are dropped by whoever reads the log
        (``state_log.replay``), so records done at the front cost no delete:
        a row once written never needs one above the start either (a record
        that mattered keeps mattering: its delivery count stays), so
        ``deleted`` is always empty now (logs written before carry some).
        A write costs what changed, not the whole window. If the write fails,
        hand the answer back to ``unwritten``.
        """
        start = self.start_offset
        changed, self.changed = self.changed, set()
        rows: list[list] = []
        entries, restored = self.entries, self.restored
        for offset in changed:
            if offset < start:
                continue  # below the start: moot
            entry = entries.get(offset) or restored.get(offset)
            if entry is not None and (entry.count or entry.state is not State.AVAILABLE):
                rows.append(entry.to_list(offset))
        moved = None
        if start != self._start_logged:
            moved = self._start_logged = start
        return moved, rows, []

    def unwritten(self, rows: list[list], deleted: list[int]) -> None:
        """A write of ``changes()``' answer failed: include all of it in the next answer."""
        self.changed.update(row[0] for row in rows)
        self._start_logged = -1

    def snapshot_for_log(self) -> dict:
        """``snapshot()``, written to the state log now: later ``changes()`` are relative to it."""
        snapshot = self.snapshot()
        snapshot["entries"] = [row for row in snapshot["entries"] if row[0] >= snapshot["start"]]
        self.changed = set()
        self._start_logged = snapshot["start"]
        return snapshot

    def snapshot(self) -> dict:
        """Everything a new coordinator needs; fresh records are left out (the log has them)."""
        rows = [
            entry.to_list(offset)
            for source in (self.entries, self.restored)
            for offset, entry in source.items()
            if entry.count or entry.state is not State.AVAILABLE
        ]
        rows.sort()
        return {"start": self.start_offset, "entries": rows}

    @classmethod
    def restore(cls, snapshot: dict, settings: QueueSettings, *, jitter: Callable[[], float] = random.random) -> SharePartition:
        share = cls(snapshot["start"], settings, jitter=jitter)
        share._start_logged = snapshot["start"]
        for row in snapshot["entries"]:
            offset, entry = Entry.from_list(row)
            if entry.state in _DONE and offset < share.start_offset:
                continue
            share.restored[offset] = entry
            if entry.state is State.ACQUIRED:
                share.in_flight += 1
            elif entry.state is State.DEAD_LETTERING:
                share._maybe_dead_lettering = True
        return share
