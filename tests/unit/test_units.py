"""Quantities in words (platform/controlplane/units.py)."""

from __future__ import annotations

import pytest
from tideway_server.controlplane.units import duration_ms, money, size


@pytest.mark.parametrize(("count", "words"), [(0, "0 B"), (1023, "1,023 B"), (1024, "1 KiB"), (1536, "1.5 KiB"),
                                              (1 << 20, "1 MiB"), (1 << 30, "1 GiB"), (100 << 30, "100 GiB"),
                                              (3 << 40, "3 TiB")])
def test_sizes(count, words):
    assert size(count) == words


@pytest.mark.parametrize(("milliseconds", "words"), [(250, "250 ms"), (1_000, "1 second"), (90_000, "1.5 minutes"),
                                                     (3_600_000, "1 hour"), (604_800_000, "7 days"),
                                                     (2_592_000_000, "30 days"), (315_360_000_000, "3,650 days")])
def test_durations(milliseconds, words):
    assert duration_ms(milliseconds) == words


def test_money():
    assert money(4900) == "USD 49.00"
    assert money(123456, "EUR") == "EUR 1,234.56"
    assert money(0.4) == "USD 0.00"
