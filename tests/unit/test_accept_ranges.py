"""How a loop turn's accepts become ranges of offsets (tideway/native/queue.py::_ranges)."""

from __future__ import annotations

import random

from tideway.native.queue import _ranges


def _offsets(ranges) -> list[tuple[int, int, int]]:
    return sorted((r.partition, offset, r.delivery_count) for r in ranges for offset in range(r.first_offset, r.last_offset + 1))


def test_receipts_in_the_order_received_make_one_range_per_partition_run():
    receipts = [(2, o, 1) for o in range(100, 200)] + [(0, o, 1) for o in range(5, 50)] + [(2, o, 1) for o in range(300, 310)]
    ranges = _ranges(receipts)
    assert [(r.partition, r.first_offset, r.last_offset, r.delivery_count) for r in ranges] == [
        (2, 100, 199, 1), (0, 5, 49, 1), (2, 300, 309, 1)]


def test_a_receipt_twice_counts_once_and_disorder_still_gives_disjoint_ranges():
    receipts = [(1, o, 1) for o in range(0, 50)]
    shuffled = receipts + receipts[10:20]  # ten receipts twice
    random.Random(7).shuffle(shuffled)
    ranges = _ranges(shuffled)
    assert _offsets(ranges) == sorted(receipts)  # every offset once
    assert [(r.first_offset, r.last_offset) for r in ranges] == [(0, 49)]


def test_delivery_counts_split_ranges():
    ranges = _ranges([(0, 1, 1), (0, 2, 2), (0, 3, 2), (0, 4, 1)])
    assert _offsets(ranges) == [(0, 1, 1), (0, 2, 2), (0, 3, 2), (0, 4, 1)]
    assert all(r.delivery_count in (1, 2) for r in ranges) and len(ranges) == 3
