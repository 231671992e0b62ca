"""The partition log on disk, over a matrix of configurations, with real corruption."""

import itertools
import logging
import os
import time

import pytest
from tideway_server.brokers.storage import Log, LogManager, TopicConfig

from tideway.protocol.errors import CorruptRecordError, MessageTooLargeError, OffsetOutOfRangeError
from tideway.record import BatchBuilder, decode_records
from tideway.record.batch import stamp_batch

MATRIX = [
    pytest.param(TopicConfig(flush_interval_ms=flush, segment_bytes=segment, index_interval_bytes=interval), id=f"flush{flush}-seg{segment}-idx{interval}")
    for flush, segment, interval in itertools.product([0, -1, 100], [4096, 1 << 30], [1, 4096])
]


def make_batch(values, timestamp_ms=None, key=None):
    builder = BatchBuilder()
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for value in values:
        builder.append(now, key, value)
    return bytearray(builder.build())


def fill(log, batches=60, per_batch=7, timestamp_ms=None):
    expected = []
    for b in range(batches):
        values = [b"batch %d record %d" % (b, r) for r in range(per_batch)]
        log.append(make_batch(values, timestamp_ms), leader_epoch=0)
        expected += values
    log.high_watermark = log.log_end_offset
    return expected


def read_all(log, start=0, max_bytes=3000):
    values, offset = [], start
    while offset < log.high_watermark:
        result = log.read(offset, max_bytes)
        records = [r for r in decode_records_all(result.records) if r.offset >= offset]
        assert records, f"no progress at {offset}"
        assert [r.offset for r in records] == list(range(offset, offset + len(records)))
        values += [r.value for r in records]
        offset = records[-1].offset + 1
    return values


def decode_records_all(data):
    from tideway.record.batch import iter_batches

    out = []
    for position, _base, size in iter_batches(data):
        out += decode_records(data[position : position + size])
    return out


@pytest.mark.parametrize("config", MATRIX)
def test_append_read_reopen_across_the_matrix(tmp_path, config):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    expected = fill(log)
    assert read_all(log) == expected
    assert read_all(log, start=123) == expected[123:]
    if config.segment_bytes == 4096:
        assert len(log.segments) > 1
    log.flush()
    log.close()
    for recovery_point in (None, 0):  # clean reopen, then a full recovery scan
        reopened = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=recovery_point)
        assert reopened.log_end_offset == len(expected)
        assert read_all(reopened) == expected
        reopened.close()


@pytest.mark.parametrize("config", MATRIX[:4])
def test_read_by_timestamp(tmp_path, config):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    for i in range(50):
        log.append(make_batch([b"a", b"b"], timestamp_ms=1_000_000 + i * 10), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    assert log.offset_for_timestamp(0) == (0, 1_000_000)
    assert log.offset_for_timestamp(1_000_250) == (50, 1_000_250)
    assert log.offset_for_timestamp(1_000_251) == (52, 1_000_260)
    assert log.offset_for_timestamp(2_000_000) == (-1, -1)


def test_offsets_outside_the_log_are_out_of_range(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None)
    fill(log, batches=3)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(log.log_end_offset + 1, 1000)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(-1, 1000)
    assert log.read(log.log_end_offset, 1000).records == b""


def test_bad_batches_change_nothing(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(max_message_bytes=2000), recovery_point=None)
    fill(log, batches=2)
    size_before, end_before = log.size_bytes, log.log_end_offset
    corrupt = make_batch([b"x" * 10])
    corrupt[-1] ^= 1
    good_then_bad = make_batch([b"ok"]) + corrupt
    for data, error in [(corrupt, CorruptRecordError), (good_then_bad, CorruptRecordError), (make_batch([b"y" * 3000]), MessageTooLargeError)]:
        with pytest.raises(error):
            log.append(data, leader_epoch=0)
    assert (log.size_bytes, log.log_end_offset) == (size_before, end_before)


def _unclean_copy(log):
    """Flush the log to disk and drop it without a clean close."""
    log.flush()
    for segment in log.segments:
        os.close(segment.fd)
        segment.fd = -1


@pytest.mark.parametrize("damage", ["cut", "flip_crc_region", "flip_length", "garbage_tail"])
def test_recovery_truncates_a_torn_or_corrupt_tail(tmp_path, caplog, damage):
    config = TopicConfig(segment_bytes=1 << 20)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    expected = fill(log, batches=20, per_batch=5)
    last_batch_position = log.active_segment._position_of(log.log_end_offset - 1)
    path = log.active_segment.log_path
    _unclean_copy(log)
    with open(path, "r+b") as f:
        size = os.path.getsize(path)
        if damage == "cut":
            f.truncate(size - 3)
        elif damage == "flip_crc_region":
            f.seek(last_batch_position + 65)
            byte = f.read(1)
            f.seek(last_batch_position + 65)
            f.write(bytes([byte[0] ^ 0xFF]))
        elif damage == "flip_length":
            f.seek(last_batch_position + 8)
            f.write(b"\x7f\xff\xff\xff")
        else:
            f.seek(size)
            f.write(os.urandom(100))
    caplog.set_level(logging.WARNING)
    recovered = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=0)
    keep = len(expected) if damage == "garbage_tail" else len(expected) - 5
    assert recovered.log_end_offset == keep
    assert read_all(recovered) == expected[:keep]
    assert "truncating" in caplog.text and path in caplog.text
    # The log accepts new writes after the cut, at the right offset.
    result = recovered.append(make_batch([b"after"]), leader_epoch=0)
    assert result.base_offset == keep


def test_corruption_in_an_early_segment_drops_everything_after_it(tmp_path, caplog):
    config = TopicConfig(segment_bytes=2048)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    expected = fill(log, batches=40, per_batch=3)
    assert len(log.segments) >= 3
    second = log.segments[1]
    path, base = second.log_path, second.base_offset
    _unclean_copy(log)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\x00" * 8)
    caplog.set_level(logging.WARNING)
    recovered = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=0)
    assert recovered.log_end_offset < len(expected)
    assert recovered.log_end_offset >= base
    assert read_all(recovered) == expected[: recovered.log_end_offset]
    assert "follows corruption" in caplog.text


def test_retention_by_time_deletes_whole_old_segments(tmp_path):
    config = TopicConfig(segment_bytes=2048, retention_ms=60_000)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    now = int(time.time() * 1000)
    fill(log, batches=30, per_batch=3, timestamp_ms=now - 3_600_000)  # an hour old
    old_end = log.log_end_offset
    fill(log, batches=5, per_batch=3, timestamp_ms=now)
    segments_before = len(log.segments)
    deleted = log.enforce_retention(now)
    assert deleted > 0 and len(log.segments) == segments_before - deleted
    # Only segments entirely older than retention went: start is a segment boundary at or below the first new offset.
    assert 0 < log.log_start_offset <= old_end
    assert all(s.max_timestamp >= now - 3_600_000 for s in log.segments)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 1000)
    assert read_all(log, start=log.log_start_offset)[-15:] == [b"batch %d record %d" % (b, r) for b in range(5) for r in range(3)]


def test_retention_by_time_removes_an_expired_active_segment_too(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(retention_ms=1000), recovery_point=None)
    fill(log, batches=3, timestamp_ms=int(time.time() * 1000) - 10_000)
    end = log.log_end_offset
    log.enforce_retention(int(time.time() * 1000))
    assert log.log_start_offset == end == log.log_end_offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(0, 100)


def test_retention_by_size_keeps_at_least_the_limit(tmp_path):
    config = TopicConfig(segment_bytes=2048, retention_bytes=6000)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    fill(log, batches=80, per_batch=3)
    log.enforce_retention(int(time.time() * 1000))
    assert 6000 <= log.size_bytes < 6000 + 2048 + 400
    assert log.log_start_offset == log.segments[0].base_offset > 0


def test_manager_recovers_after_crash_and_keeps_topics(tmp_path):
    manager = LogManager(str(tmp_path))
    manager.open()
    manager.create_topic("orders", TopicConfig(partitions=3))
    for p in range(3):
        fill(manager.get_log("orders", p), batches=4)
    manager.close()
    manager = LogManager(str(tmp_path))
    manager.open()
    assert [manager.get_log("orders", p).log_end_offset for p in range(3)] == [28, 28, 28]
    with pytest.raises(Exception, match="in use"):
        LogManager(str(tmp_path)).open()
    manager.delete_topic("orders")
    assert not (tmp_path / "orders-0").exists()


def test_topic_changes_are_journalled_and_survive_a_crash_and_a_torn_line(tmp_path):
    """A topic's change appends a line (topics.journal), not a rewrite of every topic; a reopen
    without a clean shutdown sees every change acknowledged, and a line cut short is dropped."""
    manager = LogManager(str(tmp_path))
    manager.open()
    for i in range(300):  # past the journal's fold point (256 lines): folded once, then journalled again
        manager.create_topic(f"t{i}", TopicConfig(partitions=1), local_partitions=[])
    manager.set_config("t5", TopicConfig(partitions=1, retention_ms=60_000))
    manager.delete_topic("t7")
    journal = (tmp_path / "topics.journal").read_bytes()
    assert 0 < journal.count(b"\n") < 300  # the fold happened; the changes since are lines
    os.close(manager._lock_fd)  # a crash: no close(), no clean-shutdown marker
    manager._lock_fd = -1
    with open(tmp_path / "topics.journal", "ab") as f:
        f.write(b'["half-writ')  # a line the crash cut short: never acknowledged
    reopened = LogManager(str(tmp_path))
    reopened.open()
    assert len(reopened.topics) == 299 and "t7" not in reopened.topics and "half-writ" not in str(reopened.topics)
    assert reopened.topics["t5"].retention_ms == 60_000 and reopened.topics["t299"].partitions == 1
    assert (tmp_path / "topics.journal").read_bytes() == b""  # folded at open


def test_a_crash_that_lost_the_latest_epochs_rebuilds_them_from_the_log(tmp_path):
    """A new epoch's entry is written without an fsync: after a crash the cache may hold only a prefix of them."""
    config = TopicConfig(segment_bytes=2048)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    for epoch in (0, 0, 3, 3, 7):
        log.append(make_batch([b"record in epoch %d" % epoch] * 3), leader_epoch=epoch)
    assert log.epochs.entries == [(0, 0), (3, 6), (7, 12)]
    checkpoint = log.epochs.path
    _unclean_copy(log)
    with open(checkpoint, "w") as stale:  # as a power cut could leave it: the state before epochs 3 and 7
        stale.write("0 0\n")

    recovered = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=0)
    assert recovered.epochs.entries == [(0, 0), (3, 6), (7, 12)]
    assert recovered.epochs.end_offset_for(3, recovered.log_end_offset) == (3, 12)

    # A clean close makes the file durable and the next start trusts it as it is.
    recovered.append(make_batch([b"epoch 9"]), leader_epoch=9)
    recovered.close()
    with open(checkpoint) as synced:
        assert synced.read() == "0 0\n3 6\n7 12\n9 15\n"


def test_rolled_segments_files_are_closed_beyond_the_limit_and_reopened_to_read(tmp_path):
    from tideway_server.brokers.storage.open_files import OpenFiles

    files = OpenFiles(limit=3)
    config = TopicConfig(segment_bytes=2048)
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, "t", 0, config, recovery_point=None, open_files=files)
    expected = fill(log, batches=60, per_batch=7)
    assert len(log.segments) > 5
    open_now = lambda: sum(1 for s in log.segments if s.fd >= 0)  # noqa: E731
    assert open_now() == 3  # three files at most, the active segment's among them
    # Reading everything opens old files again and closes others; what is read is right.
    assert read_all(log) == expected
    assert open_now() == 3 and len(files) == 3
    # Appends, fsyncs and the next roll still work; so do a clean close and a reopen.
    more = [b"after %d" % i for i in range(40)]
    for value in more:
        log.append(make_batch([value * 10]), leader_epoch=0)
    log.high_watermark = log.log_end_offset
    log.flush()
    assert [v[:len(b"after 0")] for v in read_all(log)[len(expected):]][:1] == [b"after 0"]
    log.close()
    assert all(s.fd < 0 for s in log.segments)
    reopened = Log.open(directory, "t", 0, config, recovery_point=0, open_files=OpenFiles(limit=2))
    assert sum(1 for s in reopened.segments if s.fd >= 0) == 2
    assert read_all(reopened)[:len(expected)] == expected


def test_an_fsync_waiting_for_the_disk_does_not_hold_up_appends_and_reads(tmp_path, monkeypatch):
    """flush: always fsyncs on a flusher thread while the event loop appends: the loop must not wait for the disk."""
    import threading

    from tideway_server.brokers.storage import segment as segment_module
    from tideway_server.brokers.storage.open_files import OpenFiles

    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None, open_files=OpenFiles(limit=10))
    expected = fill(log, batches=3, per_batch=2)
    in_fsync, disk_done = threading.Event(), threading.Event()
    real_fsync = os.fsync

    def slow_disk(fd):  # the disk taking its time over this fsync
        in_fsync.set()
        disk_done.wait(30)
        real_fsync(fd)

    monkeypatch.setattr(segment_module.os, "fsync", slow_disk)
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    try:
        assert in_fsync.wait(10)
        done, read = threading.Event(), []

        def append_and_read():
            log.append(make_batch([b"during the fsync"]), leader_epoch=0)
            log.high_watermark = log.log_end_offset
            read.extend(read_all(log))
            done.set()

        threading.Thread(target=append_and_read, daemon=True).start()
        assert done.wait(10), "the append or the read waited for the fsync"
        assert read == expected + [b"during the fsync"]
    finally:
        disk_done.set()
        flusher.join(10)
    assert log.flushed_offset == len(expected)  # the fsync covers what was there when it started


def test_a_follower_truncating_into_a_rolled_segment_writes_to_it_again(tmp_path):
    from tideway_server.brokers.storage.open_files import OpenFiles

    files = OpenFiles(limit=1)
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=2048), recovery_point=None, open_files=files)
    expected = fill(log, batches=30, per_batch=7)
    rolled = log.segments[-2]
    log.read(0, 100)  # the oldest segment's file opens; the others close (one at most)
    assert rolled.fd < 0 and log.active_segment.fd < 0
    cut = rolled.base_offset + 10  # inside the last rolled segment
    log.truncate_to(cut)
    assert log.active_segment is rolled
    end = log.log_end_offset
    assert rolled.base_offset < end <= cut
    log.append(make_batch([b"new"]), leader_epoch=1)
    log.high_watermark = log.log_end_offset
    assert read_all(log) == expected[:end] + [b"new"]


def test_new_epochs_are_written_by_the_checkpoint_not_by_the_append(tmp_path):
    manager = LogManager(str(tmp_path / "data"))
    manager.open()
    manager.create_topic("t", TopicConfig(partitions=3))
    logs = [manager.logs[("t", p)] for p in range(3)]
    for log in logs:
        log.append(make_batch([b"a"]), leader_epoch=4)
    assert not any(os.path.exists(log.epochs.path) for log in logs)  # nothing written on the append's path
    manager.checkpoint()
    for log in logs:
        with open(log.epochs.path) as f:
            assert f.read() == "4 0\n"
    logs[0].append(make_batch([b"b"]), leader_epoch=5)
    manager.close()
    with open(logs[0].epochs.path) as f:
        assert f.read() == "4 0\n5 1\n"


def test_the_last_append_is_served_as_the_disk_holds_it_and_never_once_the_log_moved_on(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None)
    fill(log, batches=3, per_batch=2)
    last = log.log_end_offset - 2
    served = log.read(last, 1 << 20).records
    log._tail = None  # what a read from the file gives
    assert served == log.read(last, 1 << 20).records
    assert [r.value for r in decode_records_all(served)] == [b"batch 2 record 0", b"batch 2 record 1"]

    log.append(make_batch([b"not yet committed"]), leader_epoch=0)
    assert log.read(log.log_end_offset - 1, 1 << 20).records == b""  # above the HW: not served from memory either
    # This replica follows a new leader whose log differs from here on: truncated, then the leader's batch copied
    # to the same offsets (the same end as the append above).
    offset = log.log_end_offset - 1
    log.truncate_to(offset)
    copied = make_batch([b"the new leader's"])
    stamp_batch(copied, 0, offset, 1)
    log.append_replicated(bytes(copied))
    log.high_watermark = log.log_end_offset
    assert [r.value for r in decode_records_all(log.read(log.log_end_offset - 1, 1 << 20).records)] == [b"the new leader's"]


def test_deleting_records_moves_the_start_mid_segment_removes_whole_segments_and_survives_a_reopen(tmp_path):
    config = TopicConfig(segment_bytes=2048)
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, "t", 0, config, recovery_point=None)
    values = fill(log, batches=120, per_batch=3)
    segments_before = len(log.segments)
    middle = log.segments[3].base_offset + 2  # inside a segment, inside a batch
    assert log.delete_records(middle) == middle == log.log_start_offset
    assert len(log.segments) == segments_before - 3  # the three whole segments below it; not the one it is in
    with pytest.raises(OffsetOutOfRangeError):
        log.read(middle - 1, 1000)
    assert read_all(log, start=middle) == values[middle:]
    assert log.delete_records(5) == middle  # less than the start: nothing changes
    with pytest.raises(OffsetOutOfRangeError):
        log.delete_records(log.high_watermark + 1)  # past what consumers see: refused
    log.close()

    again = Log.open(directory, "t", 0, config, recovery_point=None)  # the start is on disk
    assert again.log_start_offset == middle
    with pytest.raises(OffsetOutOfRangeError):
        again.read(middle - 1, 1000)
    end = again.log_end_offset
    assert again.delete_records(end) == end  # everything: the active segment goes too
    assert len(again.segments) == 1 and again.segments[0].size_bytes == 0 and again.log_end_offset == end
    again.append(make_batch([b"after the purge"]), leader_epoch=0)
    again.high_watermark = again.log_end_offset
    assert read_all(again, start=end) == [b"after the purge"]


def test_a_follower_follows_its_leaders_start_up_to_what_it_holds_and_starts_over_behind_it(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=2048), recovery_point=None)
    fill(log, batches=20, per_batch=3)
    end = log.log_end_offset
    log.follow_start(end + 100)  # the leader deleted more than this replica holds yet: up to its end
    assert log.log_start_offset == end
    log.start_over_at(end + 100)
    assert log.log_start_offset == log.log_end_offset == log.high_watermark == end + 100
    with pytest.raises(OffsetOutOfRangeError):
        log.read(end, 100)
