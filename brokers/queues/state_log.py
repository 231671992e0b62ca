"""How a queue group's share-partition state is kept in the coordinator's compacted log.

Two kinds of records per (group, topic, partition), keys as in coordinator.py::

    ["share", group, topic, partition]              {"seq", "start", "entries"}  a snapshot
    ["share-delta", group, topic, partition, slot]  {"seq", "start", "rows", "deleted"}  one write's changes

Every write is numbered (``seq``). Most writes are deltas: what changed since
the write before (``SharePartition.changes``), one record whatever its size,
so a write costs what changed, not the whole window, and one encoding call.
A delta goes to slot ``seq % SLOTS``; before a slot could be reused, a
snapshot (the whole state, numbered like a write) is written instead, so the
latest record of each key - all that compaction keeps - is always enough:
the state is the snapshot with every later delta applied in ``seq`` order
(``replay``).
"""

from __future__ import annotations

from tideway_server.brokers.queues.share_partition import SharePartition

__all__ = ["SLOTS", "StateLog", "keys_written", "replay"]

SLOTS = 64


class StateLog:
    """The writing side for one share-partition: numbering, and when to write a snapshot."""

    def __init__(self, group_id: str, topic: str, partition: int, *, slots: int = SLOTS) -> None:
        self.where = [group_id, topic, partition]
        self.slots = slots
        self.seq = 0  # the last number given out
        # The number of the newest snapshot written, None before one: the first write of a
        # coordinator is always a snapshot (it does not know which slots hold what). Writes are
        # appended in the order they are made, so a delta always lands after the snapshot it
        # follows; if that snapshot fails, so does everything after it, or nothing does.
        self.snapshot_seq: int | None = None

    def start_after(self, seq: int) -> None:
        """Carry on numbering after a log that was replayed up to ``seq``."""
        self.seq = max(self.seq, seq)

    def next_write(self, share: SharePartition) -> tuple[list[tuple[list, object]], object]:
        """The records of the next write, and what to hand to ``failed`` if it fails."""
        self.seq += 1
        seq = self.seq
        if self.snapshot_seq is None or seq - self.snapshot_seq >= self.slots:
            self.snapshot_seq = seq
            return [(["share", *self.where], {"seq": seq, **share.snapshot_for_log()})], None
        start, rows, deleted = share.changes()
        value = {"seq": seq, "start": start, "rows": rows, "deleted": deleted}
        return [(["share-delta", *self.where, seq % self.slots], value)], (rows, deleted)

    def failed(self, share: SharePartition, undo) -> None:
        """A write failed: its changes go with the next one (after a failed snapshot, a new one)."""
        if undo is None:
            self.snapshot_seq = None
        else:
            share.unwritten(*undo)


def keys_written(group_id: str, topic: str, partition: int, seq: int, *, slots: int = SLOTS) -> list[list]:
    """Every key a share-partition's log may hold after ``seq`` numbered writes (its snapshot and the delta
    slots used so far): what to tombstone when its topic goes."""
    used = range(slots) if seq >= slots else sorted({n % slots for n in range(1, seq + 1)})
    return [["share", group_id, topic, partition]] + [["share-delta", group_id, topic, partition, slot] for slot in used]


def replay(snapshot: dict | None, deltas: list[dict]) -> tuple[dict, int] | None:
    """The state (as ``SharePartition.restore`` takes it) and the last write's number; None without a snapshot."""
    if snapshot is None:
        return None
    start = snapshot["start"]
    rows = {row[0]: row for row in snapshot["entries"]}
    seq = snapshot["seq"]
    for delta in sorted(deltas, key=lambda d: d["seq"]):
        if delta["seq"] <= snapshot["seq"]:
            continue  # an older write, in a slot not reused since
        for row in delta["rows"]:
            rows[row[0]] = row
        for offset in delta["deleted"]:
            rows.pop(offset, None)
        if delta["start"] is not None:
            start = delta["start"]
        seq = delta["seq"]
    return {"start": start, "entries": [row for offset, row in sorted(rows.items()) if offset >= start]}, seq
