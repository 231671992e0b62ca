"""A group's status and time-to-drain from its last window of samples (Burrow's idea, Tideway's rules).

Per partition, over the window (the newest samples, oldest first):

* **OK**: some sample has no lag, or the lag did not grow (last <= first).
* **WARNING**: the group consumes (its position moved) but the lag grew over the window.
* **ERROR**: it consumes, the lag grew, and the lag in seconds grew by at least half the window's length:
  the consumer advances through the log less than half as fast as time passes.
* **STALLED**: the position did not move, there is lag all through, and a consumer is there (a stream
  group has members; a queue group has messages in flight on any of its partitions: its workers hold what
  they received, whichever partitions it came from): it is stuck.
* **STOPPED**: the position did not move, there is lag all through, and no consumer is there.

A group is its worst partition (OK < WARNING < ERROR < STALLED < STOPPED). A window of one sample says
nothing about movement: OK.

Time-to-drain per partition: lag now / (consume rate - produce rate), the rates averaged over the window
(position and log end moved, divided by its length). When the consume rate does not exceed the produce
rate a partition with lag is **falling behind** (no estimate). The group's estimate is its slowest
partition's; one partition falling behind makes the group fall behind.
"""

from __future__ import annotations

from dataclasses import dataclass

ORDER = ["OK", "WARNING", "ERROR", "STALLED", "STOPPED"]


@dataclass(frozen=True)
class Sample:
    at_ms: int
    position: int
    log_end: int
    lag: int
    lag_ms: int
    in_flight: int
    members: int


@dataclass(frozen=True)
class PartitionState:
    partition: int
    status: str
    lag: int
    lag_ms: int
    produce_rate: float
    consume_rate: float
    drain_s: float | None
    falling_behind: bool


def judge_group(kind: str, windows: dict[int, list[Sample]]) -> dict:
    """The group's state (``group_state``) from each partition's window of samples."""
    present = None
    if kind == "queue":  # a worker holding messages of one partition is there for all of them
        present = any(max(window, key=lambda s: s.at_ms).in_flight > 0 for window in windows.values() if window)
    return group_state([partition_state(p, kind, window, consumer_present=present) for p, window in windows.items()])


def partition_state(partition: int, kind: str, window: list[Sample], *, consumer_present: bool | None = None) -> PartitionState:
    """``consumer_present``: whether the group has a consumer (default: judged on this partition's last sample)."""
    window = sorted(window, key=lambda s: s.at_ms)
    first, last = window[0], window[-1]
    seconds = (last.at_ms - first.at_ms) / 1000
    produce = (last.log_end - first.log_end) / seconds if seconds > 0 else 0.0
    consume = (last.position - first.position) / seconds if seconds > 0 else 0.0
    status = "OK"
    if len(window) > 1 and all(s.lag > 0 for s in window):
        if last.position == first.position:
            present = consumer_present
            if present is None:
                present = last.members > 0 if kind == "stream" else last.in_flight > 0
            status = "STALLED" if present else "STOPPED"
        elif last.lag > first.lag:
            status = "ERROR" if last.lag_ms - first.lag_ms >= (last.at_ms - first.at_ms) / 2 else "WARNING"
    drain = None
    falling = False
    if last.lag > 0 and len(window) > 1:
        if consume > produce:
            drain = last.lag / (consume - produce)
        else:
            falling = True
    return PartitionState(partition, status, last.lag, last.lag_ms, round(produce, 3), round(consume, 3),
                          None if drain is None else round(drain, 1), falling)


def group_state(states: list[PartitionState]) -> dict:
    """The group's status, lag, rates and time-to-drain from its partitions'."""
    status = max((s.status for s in states), key=ORDER.index, default="OK")
    falling = any(s.falling_behind for s in states)
    drains = [s.drain_s for s in states if s.drain_s is not None]
    return {"status": status, "lag": sum(s.lag for s in states), "lag_ms": max((s.lag_ms for s in states), default=0),
            "produce_rate": round(sum(s.produce_rate for s in states), 3),
            "consume_rate": round(sum(s.consume_rate for s in states), 3),
            "drain_s": None if falling or not drains else max(drains), "falling_behind": falling,
            "partitions": [{"partition": s.partition, "status": s.status, "lag": s.lag, "lag_ms": s.lag_ms,
                            "produce_rate": s.produce_rate, "consume_rate": s.consume_rate, "drain_s": s.drain_s,
                            "falling_behind": s.falling_behind} for s in sorted(states, key=lambda s: s.partition)]}
