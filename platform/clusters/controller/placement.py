"""Where a topic's replicas go: spread over brokers (and racks), leaders balanced.

Pure functions, no database.
"""

from __future__ import annotations

from collections.abc import Sequence


def rack_alternating(brokers: Sequence[tuple[int, str]]) -> list[int]:
    """Broker ids ordered so consecutive ids sit on different racks when possible.

    [(1, "a"), (2, "a"), (3, "b"), (4, "b")] -> [1, 3, 2, 4].
    """
    by_rack: dict[str, list[int]] = {}
    for broker_id, rack in sorted(brokers):
        by_rack.setdefault(rack, []).append(broker_id)
    racks = sorted(by_rack)
    ordered: list[int] = []
    while any(by_rack.values()):
        for rack in racks:
            if by_rack[rack]:
                ordered.append(by_rack[rack].pop(0))
    return ordered


def assign_replicas(
    brokers: Sequence[tuple[int, str]], partitions: int, replication_factor: int, *, start: int = 0
) -> list[list[int]]:
    """Replica lists, preferred leader first, for ``partitions`` partitions.

    Partition p's preferred leader is the (start + p)-th broker in rack-alternating
    order, so leaders go round the brokers evenly; its followers are the next
    brokers in that order, so each partition's replicas land on distinct brokers
    (and distinct racks while there are enough racks).
    """
    ordered = rack_alternating(brokers)
    count = len(ordered)
    if replication_factor < 1 or replication_factor > count:
        raise ValueError(f"replication factor {replication_factor} needs at least that many brokers; {count} available")
    out = []
    for p in range(partitions):
        first = (start + p) % count
        # Shift followers by the round number so followers spread too when partitions > brokers.
        shift = 1 + (p // count) % max(count - 1, 1) if count > 1 else 0
        replicas = [ordered[first]]
        step = 0
        while len(replicas) < replication_factor:
            step += 1
            candidate = ordered[(first + step * shift) % count]
            if candidate in replicas:
                candidate = next(b for b in ordered[first:] + ordered[:first] if b not in replicas)
            replicas.append(candidate)
        out.append(replicas)
    return out
