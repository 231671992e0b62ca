"""Usage metering counts what a leader appended without reading it back, and the same as reading it back."""

import time

from tideway_server.brokers.server.usage import _count, _read_count
from tideway_server.brokers.storage import Log, TopicConfig

from tideway.record import BatchBuilder


def _append(log: Log, records: int) -> None:
    builder = BatchBuilder()
    for i in range(records):
        builder.append(int(time.time() * 1000), None, b"x" * (i + 1))
    log.append(bytearray(builder.build()), leader_epoch=0)


def test_counting_from_the_appends_agrees_with_reading_back_and_reads_only_what_came_before(tmp_path):
    log = Log.open(str(tmp_path / "t1.orders-0"), "t1.orders", 0, TopicConfig(), recovery_point=None)
    for n in (3, 1, 4):
        _append(log, n)  # before anyone counts: these are read back
    log.count_appends(keep_max=5)
    assert log.appended_from == 8
    for n in (1, 5, 9, 2):
        _append(log, n)
    log.high_watermark = log.log_end_offset
    expected = _read_count(log, 0, log.high_watermark)
    assert expected[0] == 3 + 1 + 4 + 1 + 5 + 9 + 2
    assert _count(log, 0, log.high_watermark) == expected
    assert not log.appended  # taken

    # A period ends in the middle: the batches below the high watermark now, the rest next time.
    _append(log, 6)
    middle = log.log_end_offset
    _append(log, 7)
    assert _count(log, 25, middle) == _read_count(log, 25, middle) == (6, _read_count(log, 25, middle)[1])
    assert _count(log, middle, log.log_end_offset) == _read_count(log, middle, log.log_end_offset)

    # More appends than it keeps: the oldest are read back, nothing counted twice or missed.
    start = log.log_end_offset
    for n in range(1, 9):
        _append(log, n)
    assert log.appended_from > start
    counted = _count(log, start, log.log_end_offset)
    assert counted == _read_count(log, start, log.log_end_offset)
    assert counted[0] == sum(range(1, 9))


def test_a_truncated_or_following_log_stops_counting(tmp_path):
    log = Log.open(str(tmp_path / "t1.orders-0"), "t1.orders", 0, TopicConfig(), recovery_point=None)
    log.count_appends()
    _append(log, 3)
    _append(log, 3)
    log.truncate_to(3)  # what a new leader's log did not have
    assert log.appended is None
    log.high_watermark = log.log_end_offset
    assert _count(log, 0, 3) == _read_count(log, 0, 3) and _count(log, 0, 3)[0] == 3
