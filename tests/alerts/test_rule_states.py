"""An alert rule's states (alerts.evaluate.step): M of N, the recovery threshold, missing data, reminders, and the
one evaluation-to-notification rule: firing when FIRING is entered, resolved when it is left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def _rule(**values):
    from tideway_server.alerts.models import AlertRule

    fields = {"metric": "lag_seconds", "comparator": ">", "threshold": 30.0, "recovery_threshold": 10.0, "pending_m": 1,
              "pending_n": 1, "missing_data": "insufficient_data", "repeat_interval_s": 0, **values}
    return AlertRule(**fields)


def _run(rule, values):
    from tideway_server.alerts.evaluate import step

    out = []
    for i, value in enumerate(values):
        kind = step(rule, value, T0 + timedelta(seconds=10 * i))
        out.append((rule.state, kind))
    return out


def test_m_of_n_breaches_fire_and_single_ones_only_make_it_pending():
    rule = _rule(pending_m=2, pending_n=3)
    assert _run(rule, [40, 5, 40, 20]) == [("PENDING", None), ("OK", None), ("FIRING", "firing"), ("FIRING", None)]


def test_firing_ends_only_past_the_recovery_threshold_and_says_so_once():
    rule = _rule()
    assert _run(rule, [40, 20, 15, 9, 9]) == [("FIRING", "firing"), ("FIRING", None), ("FIRING", None), ("OK", "resolved"),
                                             ("OK", None)]


def test_comparators_below_work_the_other_way():
    rule = _rule(metric="consume_rate", comparator="<", threshold=1.0, recovery_threshold=5.0)
    assert _run(rule, [0.5, 3, 6]) == [("FIRING", "firing"), ("FIRING", None), ("OK", "resolved")]


@pytest.mark.parametrize(("policy", "expected"), [
    ("insufficient_data", [("INSUFFICIENT_DATA", None), ("OK", None)]),
    ("breaching", [("FIRING", "firing"), ("OK", "resolved")]),
    ("not_breaching", [("OK", None), ("OK", None)]),
])
def test_missing_data_follows_the_rules_policy(policy, expected):
    assert _run(_rule(missing_data=policy), [None, 5]) == expected


def test_keep_last_repeats_the_last_evaluation_and_missing_data_never_resolves_a_firing_rule():
    assert _run(_rule(missing_data="keep_last", pending_m=2, pending_n=2), [40, None]) == [("PENDING", None), ("FIRING", "firing")]
    assert _run(_rule(), [40, None, None, 5]) == [("FIRING", "firing"), ("FIRING", None), ("FIRING", None), ("OK", "resolved")]


def test_a_firing_rule_reminds_every_repeat_interval():
    rule = _rule(repeat_interval_s=20)
    kinds = []
    for i, value in enumerate([40, 40, 40, 40, 40]):
        from tideway_server.alerts.evaluate import step

        now = T0 + timedelta(seconds=10 * i)
        kind = step(rule, value, now)
        if kind:
            rule.last_notified = now  # as evaluate_all records it
        kinds.append(kind)
    assert kinds == ["firing", None, "reminder", None, "reminder"]
