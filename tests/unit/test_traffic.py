"""The broker's traffic counters: per topic since start, per tenant by minute over the last hour."""

from tideway_server.brokers.server.traffic import HISTORY_MINUTES, Traffic, scope_of


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def test_scopes_are_tenant_prefixes_and_internal_topics_have_none():
    assert scope_of("t2.orders") == "t2."
    assert scope_of("t2.orders.dlq") == "t2."
    assert scope_of("__consumer_offsets") is None
    assert scope_of("plain") is None


def test_totals_per_topic_and_history_per_minute_in_the_minute_it_happened():
    clock = Clock(600 * 60 + 5)  # minute 600
    traffic = Traffic(clock)
    traffic.add_in("t1.a", 10, 1000)
    traffic.add_out("t1.a", 4, 400)
    traffic.add_in("t1.b", 1, 50)
    traffic.add_in("t2.a", 7, 70)  # another tenant
    clock.t += 60  # minute 601: quiet
    traffic.roll()
    clock.t += 60  # minute 602: quiet
    traffic.roll()
    clock.t += 60  # minute 603
    traffic.roll()
    traffic.add_out("t1.b", 1, 50)
    assert traffic.totals("t1.a") == (10, 1000, 4, 400)
    assert traffic.totals("nothing") == (0, 0, 0, 0)
    assert traffic.history("t1.") == [(600 * 60, 11, 1050, 4, 400), (603 * 60, 0, 0, 1, 50)]
    assert traffic.history("t2.") == [(600 * 60, 7, 70, 0, 0)]
    assert traffic.history("t3.") == []


def test_history_keeps_one_hour_and_a_deleted_topic_stays_in_it():
    clock = Clock(0)
    traffic = Traffic(clock)
    for minute in range(HISTORY_MINUTES + 30):
        clock.t = minute * 60 + 1
        traffic.roll()
        traffic.add_in("t1.a", 1, 10)
    traffic.forget("t1.a")
    assert traffic.totals("t1.a") == (0, 0, 0, 0)
    history = traffic.history("t1.")
    assert len(history) == HISTORY_MINUTES
    assert history[0][0] == 30 * 60 and history[-1][0] == (HISTORY_MINUTES + 29) * 60
    assert all(point[1:] == (1, 10, 0, 0) for point in history)
