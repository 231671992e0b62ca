"""Log compaction keeps the latest value per key (issue 4, part 3)."""

import os
import random
import threading
import time

from tideway_server.brokers.storage import Log, TopicConfig, cleaner

from tideway.record import BatchBuilder
from tideway.record.batch import decode_records, iter_batches, validate_batches

DAY_MS = 86_400_000


def write(log: Log, items, timestamp_ms=None) -> None:
    """Append (key, value) pairs, a few per batch."""
    now = int(time.time() * 1000) if timestamp_ms is None else timestamp_ms
    for start in range(0, len(items), 7):
        builder = BatchBuilder()
        for key, value in items[start : start + 7]:
            builder.append(now, key, value)
        log.append(bytearray(builder.build()), leader_epoch=0)
    log.high_watermark = log.log_end_offset


def read_everything(log: Log) -> list:
    records, offset = [], log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        assert data, f"nothing returned at offset {offset} below the high watermark {log.high_watermark}"
        headers = validate_batches(data, batch_bytes_max=1 << 30, from_producer=False)  # every batch intact
        for position, _base, size in iter_batches(data):
            records += [r for r in decode_records(data[position : position + size]) if r.offset >= offset]
        # A compacted batch may end in a gap: move past the whole batch, as consumers do.
        offset = headers[-1].next_offset
    return records


def latest_values(log: Log) -> dict:
    return {r.key: r.value for r in read_everything(log)}


def latest_values_of(records: list) -> dict:
    return {key: value for _offset, key, value in records}


def compact(log: Log, now_ms=None) -> None:
    compaction = cleaner.plan(log, now_ms)
    cleaner.swap(compaction, cleaner.build(compaction))


def compacted_log(tmp_path, **settings) -> Log:
    config = TopicConfig(segment_bytes=2048, cleanup_policy="compact", **settings)
    return Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)


def test_compaction_keeps_the_latest_value_of_every_key_at_its_offset(tmp_path):
    log = compacted_log(tmp_path)
    rng = random.Random(4)
    items = [(b"key-%d" % rng.randrange(20), b"value %d" % i) for i in range(600)]
    write(log, items)
    end = log.log_end_offset
    before = read_everything(log)
    compact(log)
    after = read_everything(log)
    latest = {}
    for offset, (key, _value) in enumerate(items):
        latest[key] = offset
    closed_end = log.active_segment.base_offset
    # Below the active segment: exactly one record per key, its latest (unless superseded in the active segment).
    compacted = [r for r in after if r.offset < closed_end]
    assert all(latest[r.key] == r.offset for r in compacted)
    assert len({r.key for r in compacted}) == len(compacted)
    # Every key's latest value survives, with the value it had at that offset.
    by_offset = {r.offset: r for r in after}
    for key, offset in latest.items():
        assert by_offset[offset].key == key and by_offset[offset].value == items[offset][1]
    # Offsets never move; the active segment is untouched; the log end stays.
    assert [r.offset for r in after if r.offset >= closed_end] == [r.offset for r in before if r.offset >= closed_end]
    assert log.log_end_offset == end
    assert log.size_bytes < sum(1 for _ in before) * 20  # it actually shrank


def test_tombstones_are_kept_for_delete_retention_then_dropped(tmp_path):
    log = compacted_log(tmp_path, delete_retention_ms=DAY_MS)
    old = int(time.time() * 1000) - 2 * DAY_MS
    write(log, [(b"gone", b"v1"), (b"kept", b"v1")] * 40, timestamp_ms=old)
    write(log, [(b"gone", None)], timestamp_ms=old + 1)  # tombstone, 2 days old
    write(log, [(b"fresh-delete", b"x")] * 30 + [(b"fresh-delete", None)])  # tombstone, new
    write(log, [(b"filler", b"y" * 50)] * 60)  # roll so the tombstones sit in closed segments
    compact(log)
    keys = {r.key: r.value for r in read_everything(log)}
    assert b"gone" not in keys  # old values and the expired tombstone are gone
    assert keys[b"kept"] == b"v1"
    assert b"fresh-delete" in keys and keys[b"fresh-delete"] is None  # a young tombstone stays


def test_reads_during_compaction_see_a_consistent_log(tmp_path):
    log = compacted_log(tmp_path)
    items = [(b"k%d" % (i % 30), b"v%d" % i) for i in range(1500)]
    write(log, items)
    latest = {key: value for key, value in items}
    compaction = cleaner.plan(log)
    result = {}
    worker = threading.Thread(target=lambda: result.update(done=cleaner.build(compaction)))
    worker.start()
    views = []
    while worker.is_alive():
        views.append(read_everything(log))  # readers keep going while the copy is built
    worker.join()
    cleaner.swap(compaction, result["done"])
    views.append(read_everything(log))
    for view in views:
        values = {}
        for record in view:
            assert items[record.offset] == (record.key, record.value)  # every record is real, at its own offset
            values[record.key] = record.value
        assert values == latest  # and the latest value of every key is always there
    assert len(views[-1]) < len(items)


def test_the_cleaner_reading_from_a_slow_disk_does_not_hold_up_appends_and_reads(tmp_path, monkeypatch):
    """The cleaner reads every segment, the active one too, on a worker thread: the loop must not wait for it."""
    from tideway_server.brokers.storage.open_files import OpenFiles

    config = TopicConfig(segment_bytes=2048, cleanup_policy="compact")
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None, open_files=OpenFiles(limit=100))
    items = [(b"k%d" % (i % 30), b"v%d" % i) for i in range(300)]
    write(log, items)
    compaction = cleaner.plan(log)
    in_read, disk_done = threading.Event(), threading.Event()
    real_pread = os.pread

    def slow_disk(fd, size, position):  # the disk taking its time over the cleaner's reads
        if threading.current_thread().name == "cleaner":
            in_read.set()
            disk_done.wait(30)
        return real_pread(fd, size, position)

    monkeypatch.setattr(os, "pread", slow_disk)
    result = {}
    worker = threading.Thread(target=lambda: result.update(done=cleaner.build(compaction)), name="cleaner")
    worker.start()
    try:
        assert in_read.wait(10)
        done, seen = threading.Event(), []

        def append_and_read():
            write(log, [(b"k1", b"during the read")])
            seen.extend(read_everything(log))
            done.set()

        threading.Thread(target=append_and_read, daemon=True).start()
        assert done.wait(10), "the append or the read waited for the cleaner's read"
        assert [(r.key, r.value) for r in seen] == items + [(b"k1", b"during the read")]
    finally:
        disk_done.set()
        worker.join(30)
    cleaner.swap(compaction, result["done"])
    assert latest_values(log)[b"k1"] == b"during the read"


def test_compacted_segments_survive_reopen(tmp_path):
    log = compacted_log(tmp_path)
    write(log, [(b"k%d" % (i % 5), b"v%d" % i) for i in range(400)])
    compact(log)
    expected = [(r.offset, r.key, r.value) for r in read_everything(log)]
    log.close()
    for recovery_point in (None, 0):
        reopened = Log.open(log.directory, "t", 0, log.config, recovery_point=recovery_point)
        assert [(r.offset, r.key, r.value) for r in read_everything(reopened)] == expected
        reopened.close()


def test_reads_skip_segments_that_compaction_emptied(tmp_path):
    """Regression: Log.read stopped at the first empty segment and returned nothing."""
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=4096, cleanup_policy="compact"), recovery_point=None)
    write(log, [(b"user-%d" % (i % 40), b"profile v%d" % i) for i in range(2000)])
    compact(log)
    assert sum(1 for s in log.segments if s.size_bytes == 0) >= 1  # the situation this is about (merged into one)
    assert log.read(0, 1 << 20).records  # something past the empty segments
    assert {r.key for r in read_everything(log)} == {b"user-%d" % i for i in range(40)}


def test_an_idempotent_producers_last_batch_survives_compaction_as_a_header(tmp_path):
    """After a crash the producer state is rebuilt from batch headers: compaction must not erase
    a producer's last batch, or its next batch would look like a sequence gap."""
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=1024, cleanup_policy="compact"), recovery_point=None)
    builder = BatchBuilder(producer_id=77, producer_epoch=0, base_sequence=0)
    for i in range(3):
        builder.append(int(time.time() * 1000), b"k", b"from the producer %d" % i)
    log.append(bytearray(builder.build()), leader_epoch=0)
    write(log, [(b"k", b"newer %d" % i) for i in range(100)])  # supersedes all the producer's records
    log.high_watermark = log.log_end_offset
    compact(log)
    assert all(r.value.startswith(b"newer") for r in read_everything(log))
    log.producers.clear()
    log._rebuild_batch_state()  # what a restart after a crash does
    follow_up = BatchBuilder(producer_id=77, producer_epoch=0, base_sequence=3)
    follow_up.append(int(time.time() * 1000), b"k", b"next")
    assert not log.append(bytearray(follow_up.build()), leader_epoch=0).duplicate  # accepted, in sequence


def test_compaction_merges_small_segments_and_a_crash_mid_swap_is_finished_at_open(tmp_path):
    """A log that rolls often keeps few files: cleaned segments that fit in segment.bytes together become one.
    A crash after the copy was renamed for the swap and some originals deleted is put right when the log opens."""
    config = TopicConfig(segment_bytes=4096, cleanup_policy="compact")
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    write(log, [(b"user-%d" % (i % 10), b"profile v%d" % i) for i in range(3000)])
    rolled = len(log.segments)
    assert rolled > 20
    expected = [(r.offset, r.key, r.value) for r in read_everything(log)]
    compact(log)
    assert len(log.segments) <= 3  # the kept records of every closed segment fit in one (plus the active one)
    assert latest_values(log) == latest_values_of(expected)
    log.close()

    # The crash: more segments rolled and were cleaned; the copy is renamed for the swap, and only some
    # of the segments it replaces were deleted when the broker died.
    log = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=None)
    write(log, [(b"user-%d" % (i % 10), b"later v%d" % i) for i in range(1000)])
    before_crash = latest_values(log)
    plan = cleaner.plan(log)
    result = cleaner.build(plan)
    [(first, bases)] = [(f, b) for f, b in result.merged.items() if len(b) > 1][:1]
    group = [s for s in log.segments if s.base_offset in bases]
    swap_path = cleaner.swap_file_name(group[0].log_path, group[-1].next_offset)
    os.replace(result.cleaned_paths[first], swap_path)
    for segment in group[: len(group) // 2]:
        segment.delete()
    for segment in log.segments:
        segment.close_without_indexes()
    reopened = Log.open(str(tmp_path / "t-0"), "t", 0, config, recovery_point=0)
    assert not any(".swap-" in name for name in os.listdir(reopened.directory))
    assert latest_values(reopened) == before_crash
    offsets = [r.offset for r in read_everything(reopened)]
    assert offsets == sorted(set(offsets))  # no offset twice: the covered segments are gone


def test_compaction_keeps_markers_drops_aborted_writes_and_never_lets_them_shadow_committed_values(tmp_path):
    """Issue 44: a committed transaction's values compact like any; an aborted one's records go (and never hid a
    committed value of their key); an open one's segment is not cleaned; every marker stays, so a partition
    rebuilt from its log after a crash knows how each transaction ended (its last stable offset moves on)."""
    from tideway.record.batch import ATTRIBUTE_CONTROL, ATTRIBUTE_TRANSACTIONAL, read_header

    log = compacted_log(tmp_path)
    now = int(time.time() * 1000)

    def transactional(producer_id: int, sequence: int, items) -> None:
        builder = BatchBuilder(producer_id=producer_id, producer_epoch=0, base_sequence=sequence,
                               flags=ATTRIBUTE_TRANSACTIONAL)
        for key, value in items:
            builder.append(now, key, value)
        log.append(bytearray(builder.build()), leader_epoch=0)

    def end(producer_id: int, commit: bool) -> None:
        log.append_marker(producer_id, 0, commit=commit, coordinator_epoch=0, leader_epoch=0)
        log.high_watermark = log.log_end_offset

    write(log, [(b"account-%d" % i, b"opened") for i in range(5)])
    for round_ in range(6):  # producer 7 commits, producer 8 aborts, on the same keys
        transactional(7, round_ * 5, [(b"account-%d" % i, b"committed %d" % round_) for i in range(5)])
        transactional(8, round_ * 5, [(b"account-%d" % i, b"aborted %d" % round_) for i in range(5)])
        end(7, commit=True)
        end(8, commit=False)
    write(log, [(b"filler-%d" % i, b"x" * 40) for i in range(40)])  # roll: all of the above in closed segments
    transactional(9, 0, [(b"account-0", b"still open")])  # an open transaction from here on
    write(log, [(b"filler-%d" % i, b"y" * 40) for i in range(40)])
    markers_before = sum(1 for s in log.segments for _p, h in s.iter_headers() if h.attributes & ATTRIBUTE_CONTROL)
    open_at = log.transactions.first_unstable_offset()
    compact(log)

    kept = read_everything(log)
    cleaned = [r for r in kept if r.offset < open_at]
    assert {r.key: r.value for r in cleaned if r.key.startswith(b"account")} == {
        b"account-%d" % i: b"committed 5" for i in range(5)}  # the aborted writes after them shadowed nothing
    assert not any(r.value.startswith(b"aborted") for r in kept if r.value)
    assert any(r.value == b"still open" for r in kept)  # the open transaction's segment was not cleaned
    markers_after = sum(1 for s in log.segments for _p, h in s.iter_headers() if h.attributes & ATTRIBUTE_CONTROL)
    assert markers_after == markers_before == 12

    end(9, commit=True)
    stable = log.last_stable_offset
    log._rebuild_batch_state()  # what a restart after a crash does: every transaction ends where it did
    assert log.last_stable_offset == stable == log.high_watermark
    assert read_header(log.read(open_at, 1 << 20).records).producer_id == 9
    # The aborting producer's last batch stays as a bare header: its sequence goes on after a rebuild.
    assert [t.producer_id for t in log.aborted_between(0, open_at)] == [8]
    follow_up = BatchBuilder(producer_id=8, producer_epoch=0, base_sequence=30, flags=ATTRIBUTE_TRANSACTIONAL)
    follow_up.append(now, b"account-0", b"next")
    assert not log.append(bytearray(follow_up.build()), leader_epoch=0).duplicate
