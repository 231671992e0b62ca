"""One look at every consumer group of a cluster: lag in messages and in seconds, rates, queue state.

Per group and partition: the position (a stream group's committed offset; a queue group's oldest record
not yet accepted or dead-lettered), the log end, the lag in messages, the **lag in seconds** (now minus
the timestamp of the first record not yet consumed, read from the log itself: exact, not interpolated),
records in flight (queue groups), and the produce and consume rates since the previous look. Per group:
their sums and maxima, and the queue's dead-letter depth.

The cost does not grow with requests per group: one LIST_GROUPS (with positions) per broker, one
LIST_OFFSETS per leader for every log end, one FETCH per leader per round for the first unconsumed
records' times. A group that stops committing keeps its position, so it keeps being sampled and its lag
grows; a group that is deleted disappears from the next look.

Each group's sample also carries its last ``WINDOW_LOOKS`` looks (``window``: [at ms, members, [[partition,
position, log end, lag, lag ms, in flight], ...]] each, carried from the previous look) and the **live status**
judged on them by the same rules as the ``consumer_lag`` job's (lag/status.py): a group behind is WARNING,
ERROR, STALLED or STOPPED from its looks within a minute, without waiting for the job (issue 40).

No Django here: the task (lag/tasks.py) passes the queues and the previous look, and stores the result.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from tideway_server.lag.status import Sample, judge_group

from tideway.native import TidewayClient
from tideway.native.group import group_positions, timestamps_at
from tideway.protocol.messages import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP
from tideway.protocol.names import TenantNames

# One partition's figures, in this order (a group sample's "partitions" rows; `__lag` records carry them as is).
PARTITION_FIELDS = ("partition", "position", "log_end", "lag", "lag_ms", "in_flight", "produce_rate", "consume_rate")
WINDOW_LOOKS = 10  # looks a live status is judged on (the consumer_lag job's window: WINDOW_SAMPLES)


@dataclass(frozen=True)
class QueueRef:
    """What the sampler needs of a tenant's queue."""

    tenant_id: int
    name: str
    broker_topic: str
    dead_letter_topic: str  # "" for a stream-mode queue
    partitions: int


def group_key(queue: str, kind: str, group: str) -> str:
    """A group's key within its tenant (Redis field, alert scope)."""
    return f"{kind}:{queue}:{group}"


async def sample_cluster(client: TidewayClient, queues: list[QueueRef], previous: dict[tuple[int, str], dict],
                         now_ms: int | None = None) -> list[dict]:
    """Every group with a position on one of ``queues``: a dict per group (see ``_group_sample``).

    ``previous``: the last look, {(tenant id, group key): sample}, for the rates."""
    by_topic = {q.broker_topic: q for q in queues}
    listed = await group_positions(client, None)
    partitions = [(q.broker_topic, p) for q in queues for p in range(q.partitions)]
    dead_letter_topics = [q.dead_letter_topic for q in queues if q.dead_letter_topic]
    unknown = [t for t in dead_letter_topics if t not in client.topics]
    if unknown:
        await client.refresh_metadata(unknown)
    partitions += [(t, p) for t in dead_letter_topics for p in range(len(client.topics.get(t, [])))]
    ends = {key: answer[0] for key, answer in (await client.list_offsets([(t, p, LATEST_TIMESTAMP) for t, p in partitions])).items()}
    starts = {key: answer[0] for key, answer in (await client.list_offsets([(t, p, EARLIEST_TIMESTAMP) for t, p in partitions])).items()}
    dead_letters = {q.dead_letter_topic: sum(max(0, end - starts.get((topic, p), end)) for (topic, p), end in ends.items()
                                             if topic == q.dead_letter_topic)
                    for q in queues if q.dead_letter_topic}

    # Each group's rows on each of its queues, before times.
    found = []
    for group in listed:
        for topic in sorted({p.topic for p in group.positions}):
            queue = by_topic.get(topic)
            if queue is None:
                continue
            own = TenantNames(queue.tenant_id).own_group(group.group_id)
            if own is None:
                continue
            name, kind = own
            at = {p.partition: p for p in group.positions if p.topic == topic and 0 <= p.partition < queue.partitions}
            rows = []
            for number in range(queue.partitions):
                end = ends.get((topic, number))
                if end is None:
                    continue
                position = at[number].offset if number in at and at[number].offset >= 0 else None
                if position is None and kind == "queue":  # not received from yet: it starts at the oldest record
                    position = starts.get((topic, number), 0)
                if position is None:
                    continue  # a stream group with no position there: no lag to speak of
                rows.append([number, position, end, max(0, end - position), 0,
                             at[number].in_flight if number in at else 0, 0.0, 0.0])
            found.append((queue, name, kind, group.members, rows))
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    behind = [(q.broker_topic, row[0], row[1]) for q, _n, _k, _m, rows in found for row in rows if row[3] > 0]
    stamps = await timestamps_at(client, behind)
    out = []
    for queue, name, kind, members, rows in found:
        key = group_key(queue.name, kind, name)
        before = previous.get((queue.tenant_id, key))
        earlier = {row[0]: row for row in before["partitions"]} if before else {}
        elapsed_s = (now_ms - before["at_ms"]) / 1000 if before else 0.0
        for row in rows:
            if row[3] > 0:
                stamp = stamps.get((queue.broker_topic, row[0], row[1]))
                row[4] = max(0, now_ms - stamp) if stamp is not None else 0
            old = earlier.get(row[0])
            if old is not None and elapsed_s > 0:
                row[6] = round(max(0, row[2] - old[2]) / elapsed_s, 3)
                row[7] = round(max(0, row[1] - old[1]) / elapsed_s, 3)
        sample = _group_sample(queue, name, kind, members, rows, now_ms, dead_letters.get(queue.dead_letter_topic))
        sample["window"] = (before.get("window", []) if before else [])[-(WINDOW_LOOKS - 1):] + [
            [now_ms, members, [row[:6] for row in rows]]]
        sample["status"] = live_status(kind, sample["window"])
        out.append(sample)
    return out


def live_status(kind: str, window: list) -> dict:
    """The group's status, rates and time-to-drain judged on its ``window`` of looks (see the module's note)."""
    by_partition: dict[int, list[Sample]] = {}
    for at_ms, members, rows in window:
        for partition, position, log_end, lag, lag_ms, in_flight in rows:
            by_partition.setdefault(partition, []).append(Sample(at_ms, position, log_end, lag, lag_ms, in_flight, members))
    state = judge_group(kind, by_partition)
    state["window_start_ms"], state["window_end_ms"] = window[0][0], window[-1][0]
    return state


def _group_sample(queue: QueueRef, name: str, kind: str, members: int, rows: list[list], now_ms: int,
                  dead_letters: int | None) -> dict:
    lag_ms = max((row[4] for row in rows), default=0)
    return {
        "at_ms": now_ms, "tenant_id": queue.tenant_id, "queue": queue.name, "group": name, "kind": kind,
        "members": members, "lag": sum(row[3] for row in rows), "lag_ms": lag_ms,
        "produce_rate": round(sum(row[6] for row in rows), 3), "consume_rate": round(sum(row[7] for row in rows), 3),
        "in_flight": sum(row[5] for row in rows) if kind == "queue" else None,
        # The oldest message not yet acknowledged is the one at a queue group's position: its age is the lag in time.
        "oldest_unacked_ms": lag_ms if kind == "queue" else None,
        "dead_letters": dead_letters if kind == "queue" else None,
        "partitions": rows,
    }
