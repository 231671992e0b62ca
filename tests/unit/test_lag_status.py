"""A group's status and time-to-drain from a window of samples (platform/lag/status.py): the rules as the docs
state them."""

from tideway_server.lag.status import Sample, group_state, judge_group, partition_state


def _window(positions, ends, ages_ms, *, members=1, in_flight=0, step_ms=1000):
    return [Sample(at_ms=i * step_ms, position=p, log_end=e, lag=e - p, lag_ms=a, in_flight=in_flight, members=members)
            for i, (p, e, a) in enumerate(zip(positions, ends, ages_ms, strict=True))]


def test_a_consumer_keeping_up_is_ok_and_its_drain_is_lag_over_the_net_rate():
    state = partition_state(0, "stream", _window([0, 100, 200], [50, 140, 230], [500, 400, 300]))
    assert state.status == "OK"
    # consume 100/s, produce 90/s over the window: 30 left at 10/s net
    assert state.drain_s == 3.0 and not state.falling_behind


def test_growing_lag_while_consuming_is_a_warning_and_an_error_when_time_lag_grows_fast():
    warning = partition_state(0, "stream", _window([0, 10, 20], [50, 65, 80], [1000, 1200, 1400]))
    assert warning.status == "WARNING" and warning.falling_behind and warning.drain_s is None
    error = partition_state(0, "stream", _window([0, 10, 20], [50, 65, 80], [1000, 1800, 2600]))
    assert error.status == "ERROR"


def test_a_position_that_does_not_move_is_stalled_with_a_consumer_and_stopped_without():
    stalled = partition_state(0, "stream", _window([5, 5, 5], [50, 60, 70], [1000, 2000, 3000], members=2))
    stopped = partition_state(0, "stream", _window([5, 5, 5], [50, 60, 70], [1000, 2000, 3000], members=0))
    assert (stalled.status, stopped.status) == ("STALLED", "STOPPED")
    held = partition_state(0, "queue", _window([5, 5, 5], [50, 50, 50], [1000, 2000, 3000], members=0, in_flight=3))
    gone = partition_state(0, "queue", _window([5, 5, 5], [50, 50, 50], [1000, 2000, 3000], members=0, in_flight=0))
    assert (held.status, gone.status) == ("STALLED", "STOPPED")


def test_a_queue_group_holding_messages_of_one_partition_is_stalled_on_every_stuck_partition():
    # Workers hold 3 messages of partition 0 and none of partition 1: they are there for both.
    state = judge_group("queue", {0: _window([5, 5, 5], [50, 50, 50], [1000, 2000, 3000], in_flight=3),
                                  1: _window([7, 7, 7], [50, 50, 50], [1000, 2000, 3000], in_flight=0)})
    assert [p["status"] for p in state["partitions"]] == ["STALLED", "STALLED"]
    # Nothing in flight anywhere: stopped.
    state = judge_group("queue", {0: _window([5, 5, 5], [50, 50, 50], [1000, 2000, 3000], in_flight=0),
                                  1: _window([7, 7, 7], [50, 50, 50], [1000, 2000, 3000], in_flight=0)})
    assert [p["status"] for p in state["partitions"]] == ["STOPPED", "STOPPED"]


def test_no_lag_somewhere_in_the_window_is_ok_and_one_sample_says_nothing():
    assert partition_state(0, "stream", _window([0, 10, 10], [10, 10, 20], [0, 0, 500])).status == "OK"
    assert partition_state(0, "stream", _window([5], [50], [9000], members=0)).status == "OK"


def test_a_group_is_its_worst_partition_and_its_slowest_drain():
    fast = partition_state(0, "stream", _window([0, 100, 200], [50, 140, 230], [500, 400, 300]))  # drains in 3 s
    slow = partition_state(1, "stream", _window([0, 100, 200], [90, 180, 270], [500, 400, 300]))  # 70 at 10/s: 7 s
    state = group_state([fast, slow])
    assert state["status"] == "OK" and state["drain_s"] == 7.0 and state["lag"] == 30 + 70
    behind = partition_state(2, "stream", _window([0, 10, 20], [50, 65, 80], [1000, 1800, 2600]))
    state = group_state([fast, slow, behind])
    assert state["status"] == "ERROR" and state["falling_behind"] and state["drain_s"] is None
