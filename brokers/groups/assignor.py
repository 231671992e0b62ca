"""Server-side assignment of partitions to group members: balanced and sticky.

Per topic, among the members subscribed to it, every member gets
``floor(P / M)`` or ``ceil(P / M)`` partitions. A member keeps as many of the
partitions it holds in the current target as its share allows, so adding a
member moves only the partitions the newcomer takes over, and removing one
moves only the partitions it had. Ties go to the member with the fewest
partitions over all topics, then to the smallest member id (deterministic).
"""

from __future__ import annotations

__all__ = ["assign"]

TopicPartition = tuple[str, int]


def assign(
    subscriptions: dict[str, list[str]],
    partition_counts: dict[str, int],
    current: dict[str, set[TopicPartition]],
) -> dict[str, set[TopicPartition]]:
    """The target assignment: member id -> set of (topic, partition)."""
    target: dict[str, set[TopicPartition]] = {member: set() for member in subscriptions}
    load = dict.fromkeys(subscriptions, 0)
    for topic in sorted({t for topics in subscriptions.values() for t in topics}):
        count = partition_counts.get(topic, 0)
        members = sorted(m for m, topics in subscriptions.items() if topic in topics)
        if count <= 0 or not members:
            continue
        floor, extra = divmod(count, len(members))
        held: dict[str, list[int]] = {
            m: sorted(p for t, p in current.get(m, ()) if t == topic and p < count) for m in members
        }
        taken: set[int] = set()
        mine: dict[str, int] = dict.fromkeys(members, 0)
        # Keep what each member holds, up to its share; the biggest holders keep an extra first.
        for member in sorted(members, key=lambda m: (-len(held[m]), m)):
            keep = [p for p in held[member] if p not in taken]
            quota = floor
            if len(keep) > floor and extra > 0:
                quota += 1
                extra -= 1
            for p in keep[:quota]:
                taken.add(p)
                target[member].add((topic, p))
            mine[member] = min(len(keep), quota)
        for p in range(count):
            if p in taken:
                continue
            below = [m for m in members if mine[m] < floor]
            if not below:
                below = [m for m in members if mine[m] == floor]
                extra -= 1
            chosen = min(below, key=lambda m: (mine[m], load[m], m))
            target[chosen].add((topic, p))
            mine[chosen] += 1
        for member in members:
            load[member] += mine[member]
    return target
