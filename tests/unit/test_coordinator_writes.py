"""The coordinator's state writes: those of one loop turn are one append, in order; a failed batch fails the rest.

A fake leader replica of the internal partition stands in for the log (unit test of
``GroupCoordinator.write`` alone); the whole path runs on real brokers in
tests/integration/test_queues.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import msgspec
import pytest

from brokers import errors
from brokers.groups import coordinator as coordinator_module
from brokers.groups.coordinator import INTERNAL_TOPIC, GroupCoordinator
from brokers.record.batch import decode_records
from brokers.replication import Role


class FakeLeader:
    """The leader replica of internal partition 0: notes each append's keys; commits at once (or fails on cue)."""

    def __init__(self) -> None:
        self.role = Role.LEADER
        self.appends: list[list[list]] = []
        self.fail_next: Exception | None = None

    def append_as_leader(self, data: bytearray, *, acks: int):
        assert acks == -1
        if self.fail_next is not None:
            failure, self.fail_next = self.fail_next, None
            raise failure
        self.appends.append([msgspec.msgpack.decode(record.key) for record in decode_records(data)])
        committed = asyncio.get_running_loop().create_future()
        committed.set_result(None)
        return None, committed


def _coordinator(leader: FakeLeader) -> tuple[GroupCoordinator, list[tuple[str, int]]]:
    woken: list[tuple[str, int]] = []
    metrics = SimpleNamespace(traffic=SimpleNamespace(add_out=lambda *args: None), watch_queues=lambda counts: None)
    replicas = SimpleNamespace(partitions={(INTERNAL_TOPIC, 0): leader}, metrics=metrics,
                               wake=lambda topic, partition: woken.append((topic, partition)))
    coordinator = GroupCoordinator(broker_id=1, replicas=replicas, metadata=None, create_topics=None, peer_client=None)
    return coordinator, woken


def _record(n: int, size: int = 1) -> list[tuple[list, object]]:
    return [(["offset", "g", "t", n], {"pad": "x" * size})]


async def test_the_writes_of_one_turn_are_one_append_in_the_order_they_were_made():
    leader = FakeLeader()
    coordinator, woken = _coordinator(leader)
    await asyncio.gather(*(coordinator.write(0, _record(n)) for n in range(3)))
    assert leader.appends == [[["offset", "g", "t", 0], ["offset", "g", "t", 1], ["offset", "g", "t", 2]]]
    assert woken == [(INTERNAL_TOPIC, 0)]  # the followers' fetches, once
    await coordinator.write(0, _record(3))  # a later turn: an append of its own
    assert leader.appends[1:] == [[["offset", "g", "t", 3]]]


async def test_a_turn_over_the_batch_limit_is_appended_as_several_batches_in_order(monkeypatch):
    monkeypatch.setattr(coordinator_module, "COALESCED_BATCH_BYTES_MAX", 300)
    leader = FakeLeader()
    coordinator, _woken = _coordinator(leader)
    await asyncio.gather(*(coordinator.write(0, _record(n, size=100)) for n in range(5)))
    assert [len(batch) for batch in leader.appends] == [2, 2, 1]
    assert [key[3] for batch in leader.appends for key in batch] == [0, 1, 2, 3, 4]


async def test_a_batch_that_fails_fails_its_writers_and_every_later_batch_of_the_turn_unappended(monkeypatch):
    monkeypatch.setattr(coordinator_module, "COALESCED_BATCH_BYTES_MAX", 300)
    leader = FakeLeader()
    coordinator, woken = _coordinator(leader)
    leader.fail_next = OSError("disk full")
    outcomes = await asyncio.gather(*(coordinator.write(0, _record(n, size=100)) for n in range(5)), return_exceptions=True)
    assert all(isinstance(outcome, OSError) for outcome in outcomes), outcomes
    assert leader.appends == [] and woken == []  # nothing after the failed batch was written
    await coordinator.write(0, _record(5))  # the next turn writes again
    assert leader.appends == [[["offset", "g", "t", 5]]]


async def test_a_write_to_a_partition_this_broker_does_not_lead_is_refused_at_once():
    leader = FakeLeader()
    coordinator, _woken = _coordinator(leader)
    leader.role = Role.FOLLOWER
    with pytest.raises(errors.NotCoordinatorError):
        await coordinator.write(0, _record(0))
    assert leader.appends == []
