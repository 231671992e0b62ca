"""A tenant's byte rates on a broker (brokers/server/rates.py): a second's burst, then the debt as a wait."""

from __future__ import annotations

import pytest
from tideway_server.brokers.server import rates
from tideway_server.brokers.server.rates import CONSUME, PUBLISH, TenantRates


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_second_of_the_rate_passes_then_the_debt_is_the_wait():
    clock = Clock()
    limits = TenantRates(clock)
    assert limits.charge(1, PUBLISH, 1000, 600) == 0.0
    assert limits.charge(1, PUBLISH, 1000, 400) == 0.0  # the bucket is empty now
    assert limits.charge(1, PUBLISH, 1000, 500) == pytest.approx(0.5)  # 500 bytes in debt at 1000/s
    clock.now += 0.5
    assert limits.charge(1, PUBLISH, 1000, 100) == pytest.approx(0.1)  # the debt was paid; 100 more owed
    clock.now += 10
    assert limits.charge(1, PUBLISH, 1000, 1000) == 0.0  # refilled to one second's worth, never more


def test_directions_and_tenants_are_apart_and_zero_is_unlimited():
    limits = TenantRates(Clock())
    assert limits.charge(1, PUBLISH, 100, 300) == pytest.approx(2.0)
    assert limits.charge(1, CONSUME, 100, 100) == 0.0
    assert limits.charge(2, PUBLISH, 100, 100) == 0.0
    assert limits.charge(3, PUBLISH, 0, 10**12) == 0.0


def test_one_answer_waits_at_most_the_cap_and_buckets_are_bounded(monkeypatch):
    monkeypatch.setattr(rates, "BUCKETS_MAX", 10)
    limits = TenantRates(Clock())
    assert limits.charge(1, PUBLISH, 1, 10**9) == rates.THROTTLE_S_MAX
    for tenant in range(100):
        limits.charge(tenant, CONSUME, 10, 1)
    assert len(limits._buckets) == 10
