"""The queue state machine against a small reference model (hypothesis, stateful).

Random sequences of produce, acquire, accept, release, reject, extend, time
passing (lock expiry, backoff, delays), dead-letter writes and leader
failover (snapshot, restore on a new coordinator, read the log again) must
give the same answers as the model: the same records delivered with the same
delivery counts, the same receipts refused, the same records dead-lettered.
"""

from __future__ import annotations

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from tideway_server.brokers.queues.share_partition import QueueSettings, SharePartition
from tideway_server.brokers.queues.state_log import StateLog, replay

from tideway.protocol.errors import InvalidRecordStateError

KEYS = [None, b"a", b"b", b"c"]


class Model:
    """The queue's rules, written as plainly as possible."""

    def __init__(self, settings: QueueSettings) -> None:
        self.s = settings
        self.records: dict[int, dict] = {}

    def add(self, offset: int, key, available_at: int) -> None:
        self.records[offset] = {"key": key, "avail": available_at, "state": "available", "count": 0, "deadline": 0}

    def backoff(self, count: int) -> int:
        if self.s.retry_backoff_ms <= 0:
            return 0
        ceiling = min(self.s.retry_backoff_max_ms, self.s.retry_backoff_ms * 2 ** (count - 1))
        return int(ceiling / 2 + 0.5 * ceiling / 2)

    def acquire(self, now: int, n: int, lock: int) -> list[tuple[int, int]]:
        out = []
        in_flight = sum(1 for r in self.records.values() if r["state"] == "acquired")
        seen_keys = set()
        for offset in sorted(self.records):
            r = self.records[offset]
            if len(out) >= n or in_flight >= self.s.max_in_flight:
                break
            if r["state"] in ("accepted", "dead"):
                continue
            if self.s.fifo and r["key"] is not None:
                if r["key"] in seen_keys:
                    continue
                seen_keys.add(r["key"])
            if r["state"] == "available" and r["avail"] <= now:
                r["state"], r["count"], r["deadline"] = "acquired", r["count"] + 1, now + lock
                in_flight += 1
                out.append((offset, r["count"]))
        return out

    def held(self, offset: int, count: int, now: int) -> dict | None:
        r = self.records.get(offset)
        if r is None or r["state"] != "acquired" or r["count"] != count or r["deadline"] <= now:
            return None
        return r

    def unlock(self, r: dict, now: int, delay: int) -> None:
        if r["count"] >= self.s.max_deliveries:
            r["state"] = "dead_lettering"
        else:
            r["state"], r["avail"] = "available", now + delay

    def expire(self, now: int) -> None:
        for r in self.records.values():
            if r["state"] == "acquired" and r["deadline"] <= now:
                self.unlock(r, now, 0)

    def start(self) -> int:
        unfinished = [o for o, r in self.records.items() if r["state"] not in ("accepted", "dead")]
        return min(unfinished) if unfinished else len(self.records)


class ShareMachine(RuleBasedStateMachine):
    @initialize(
        fifo=st.booleans(),
        max_deliveries=st.integers(1, 4),
        backoff=st.sampled_from([0, 100, 1000]),
        cap=st.integers(1, 6),
    )
    def setup(self, fifo, max_deliveries, backoff, cap):
        self.settings = QueueSettings(
            visibility_timeout_ms=3000, max_deliveries=max_deliveries, retry_backoff_ms=backoff,
            retry_backoff_max_ms=2000, fifo=fifo, max_in_flight=cap,
        )
        self.real = SharePartition(0, self.settings, jitter=lambda: 0.5)
        self.model = Model(self.settings)
        self.log: list[tuple[int, bytes | None, int]] = []
        # The coordinator's log of this partition's state, compacted (the latest value per key);
        # few slots, so that examples reuse them.
        self.compacted: dict = {}
        self.state_log = StateLog("g", "t", 0, slots=3)
        self.now = 1_000_000
        self.receipts: list[tuple[int, int]] = []

    @rule(keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=5), delay=st.sampled_from([0, 0, 500, 4000]))
    def produce(self, keys, delay):
        new = []
        for key in keys:
            offset = len(self.log)
            record = (offset, key, self.now + delay)
            self.log.append(record)
            new.append(record)
            self.model.add(*record)
        self.real.add_records(new, len(self.log))

    @rule(n=st.integers(1, 5), lock=st.sampled_from([None, 1000, 5000]))
    def acquire(self, n, lock):
        got = self.real.acquire(self.now, n, lock)
        expected = self.model.acquire(self.now, n, 3000 if lock is None else lock)
        assert [(a.offset, a.delivery_count) for a in got] == expected
        self.receipts.extend(expected)

    def _ack(self, data, action):
        receipt = data.draw(st.sampled_from(self.receipts))
        offset, count = receipt
        held = self.model.held(offset, count, self.now)
        try:
            action(offset, count)
        except InvalidRecordStateError:
            assert held is None, f"receipt {receipt} refused but the model holds it"
            return None
        assert held is not None, f"receipt {receipt} accepted but the model says it is stale"
        return held

    @precondition(lambda self: self.receipts)
    @rule(data=st.data())
    def accept(self, data):
        held = self._ack(data, lambda o, c: self.real.accept(o, c, self.now))
        if held is not None:
            held["state"] = "accepted"

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), span=st.integers(0, 3))
    def accept_range(self, data, span):
        """Accepts as a range of offsets (what a worker acking each message sends): each offset as if accepted alone."""
        first, count = data.draw(st.sampled_from(self.receipts))
        held = {o: self.model.held(o, count, self.now) for o in range(first, first + span + 1)}
        failed = self.real.accept_range(first, first + span, count, self.now)
        self.real.advance_start()
        assert sorted(o for o, _exc in failed) == sorted(o for o, h in held.items() if h is None)
        for h in held.values():
            if h is not None:
                h["state"] = "accepted"

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), delay=st.sampled_from([None, 0, 700]))
    def release(self, data, delay):
        held = self._ack(data, lambda o, c: self.real.release(o, c, self.now, delay_ms=delay, error="boom"))
        if held is not None:
            self.model.unlock(held, self.now, self.model.backoff(held["count"]) if delay is None else delay)

    @precondition(lambda self: self.receipts)
    @rule(data=st.data())
    def reject(self, data):
        held = self._ack(data, lambda o, c: self.real.reject(o, c, self.now, error="bad"))
        if held is not None:
            held["state"] = "dead_lettering"

    @precondition(lambda self: self.receipts)
    @rule(data=st.data(), lock=st.sampled_from([500, 10_000]))
    def extend(self, data, lock):
        held = self._ack(data, lambda o, c: self.real.extend(o, c, self.now, lock))
        if held is not None:
            held["deadline"] = self.now + lock

    @rule(ms=st.sampled_from([1, 200, 999, 1000, 3000, 6000]))
    def time_passes(self, ms):
        self.now += ms
        self.real.expire(self.now)
        self.model.expire(self.now)

    @rule()
    def dead_letters_written(self):
        for offset in self.real.dead_lettering():
            self.real.dead_lettered(offset)
            self.model.records[offset]["state"] = "dead"

    @rule()
    def state_written(self):
        """What the queue service does before answering: write the changes to the state log."""
        records, _undo = self.state_log.next_write(self.real)
        for key, value in records:
            self.compacted[tuple(key)] = value

    @rule(fail=st.booleans())
    def leader_failover(self, fail):
        if fail:  # a write that fails is carried by the next one
            _records, undo = self.state_log.next_write(self.real)
            self.state_log.failed(self.real, undo)
        self.state_written()
        snapshot, seq = replay(self.compacted.get(("share", "g", "t", 0)),
                               [v for k, v in self.compacted.items() if k[0] == "share-delta"])
        # The log says what the whole state says, without the rows that no longer matter.
        full = self.real.snapshot()
        assert snapshot["start"] == full["start"]
        assert snapshot["entries"] == [row for row in full["entries"] if row[0] >= full["start"]]
        self.real = SharePartition.restore(snapshot, self.settings, jitter=lambda: 0.5)
        self.state_log = StateLog("g", "t", 0, slots=3)
        self.state_log.start_after(seq)
        # The new coordinator reads the log again from the snapshot's start.
        self.real.add_records([r for r in self.log if r[0] >= snapshot["start"]], len(self.log))

    @invariant()
    def same_view(self):
        if not hasattr(self, "real"):
            return
        self.real.check()  # the window's own invariants (brokers/invariants.py)
        assert self.real.start_offset == self.model.start()
        expected_dlq = sorted(o for o, r in self.model.records.items() if r["state"] == "dead_lettering")
        assert sorted(self.real.dead_lettering()) == expected_dlq
        in_flight = [o for o, r in self.model.records.items() if r["state"] == "acquired"]
        assert self.real.in_flight == len(in_flight)
        assert len(in_flight) <= self.settings.max_in_flight
        if self.settings.fifo:
            keys = [self.model.records[o]["key"] for o in in_flight if self.model.records[o]["key"] is not None]
            assert len(keys) == len(set(keys)), "two in-flight records of one key"
        # Receivers waiting for a lock to expire or a delay to pass are woken in time (early is harmless).
        moments = [r["deadline"] for r in self.model.records.values() if r["state"] == "acquired"]
        moments += [r["avail"] for r in self.model.records.values() if r["state"] == "available" and r["avail"] > self.now]
        due = self.real.next_due(self.now)
        if not moments:
            assert due is None
        else:
            assert due is not None and self.now < due <= max(min(moments), self.now + 1)


ShareMachine.TestCase.settings = settings(
    max_examples=300, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_share_partition_matches_model = ShareMachine.TestCase


def test_a_delayed_record_is_not_delivered_before_its_time():
    share = SharePartition(0, QueueSettings())
    share.add_records([(0, None, 5_000), (1, None, 0)], 2)
    assert [a.offset for a in share.acquire(4_999, 10)] == [1]
    assert [a.offset for a in share.acquire(5_000, 10)] == [0]


def test_poison_record_is_dead_lettered_after_the_delivery_limit():
    share = SharePartition(0, QueueSettings(max_deliveries=3, retry_backoff_ms=0))
    share.add_records([(0, None, 0)], 1)
    for count in (1, 2, 3):
        (got,) = share.acquire(10 * count, 1)
        assert got.delivery_count == count
        dead = share.release(0, count, 10 * count + 1, error=f"failure {count}")
    assert dead and share.dead_lettering() == [0]
    assert share.entry(0).error == "failure 3"
    share.dead_lettered(0)
    assert share.start_offset == 1


def test_a_stale_receipt_cannot_acknowledge():
    share = SharePartition(0, QueueSettings(visibility_timeout_ms=1000))
    share.add_records([(0, None, 0)], 1)
    (first,) = share.acquire(0, 1)
    share.expire(1000)
    (second,) = share.acquire(1000, 1)
    with pytest.raises(InvalidRecordStateError, match="redelivered"):
        share.accept(0, first.delivery_count, 1001)
    share.accept(0, second.delivery_count, 1001)
    assert share.start_offset == 1
