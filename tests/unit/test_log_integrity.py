"""A batch that fails its CRC on disk is found and never served: on load, on read, by the scrubber.

Real files: the damage is one byte flipped inside a batch's records, where
only the CRC can tell (headers, sizes and offsets all still add up).
"""


import pytest
from tideway_server.brokers.storage import Log, TopicConfig
from tideway_server.brokers.storage.scrubber import Scrubber

from tests.unit.test_storage import decode_records_all, fill
from tideway.protocol.errors import StorageError
from tideway.record.batch import BATCH_HEADER_BYTES, iter_batches, read_header

CONFIG = TopicConfig(segment_bytes=4096, index_interval_bytes=512)


def flip_byte_in_batch(segment_path: str, batch_index: int) -> int:
    """Flip a byte in the records of the batch_index-th batch of a segment file; return that batch's base offset."""
    with open(segment_path, "rb") as f:
        data = f.read()
    position, base_offset, size = list(iter_batches(data))[batch_index]
    target = position + BATCH_HEADER_BYTES + (size - BATCH_HEADER_BYTES) // 2
    with open(segment_path, "r+b") as f:
        f.seek(target)
        f.write(bytes([data[target] ^ 0x20]))
    return base_offset


def reported(log_):
    found = []
    log_.on_corruption = lambda log_, offset, reason: found.append((offset, reason))
    return found


def test_a_byte_flipped_in_a_cleanly_closed_log_is_found_when_it_opens(tmp_path):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=60)
    middle = log_.segments[len(log_.segments) // 2]
    log_.close()
    bad_offset = flip_byte_in_batch(middle.log_path, 1)

    reopened = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)  # "clean shutdown": still checked
    offset, reason = reopened.corruption_found
    assert offset == bad_offset and "CRC" in reason
    # Nothing is cut by the load itself (the broker decides: repair from the leader or refuse).
    assert reopened.log_end_offset == 420


def test_segments_read_back_intact_are_not_checked_again_unless_they_change(tmp_path, monkeypatch):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=60)
    log_.close()
    first = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    assert first.corruption_found is None
    assert set(first.verified) == {s.base_offset for s in first.segments}
    first.close()

    scanned = []
    from tideway_server.brokers.storage.segment import Segment

    original = Segment.scan
    monkeypatch.setattr(Segment, "scan", lambda self, *a, **k: scanned.append(self.base_offset) or original(self, *a, **k))
    second = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    assert scanned == []  # every segment was proven intact and is unchanged
    target = second.segments[2]
    second.close()
    bad_offset = flip_byte_in_batch(target.log_path, 0)  # writing the file changes its mtime
    third = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    assert scanned == [target.base_offset]
    assert third.corruption_found[0] == bad_offset


def test_a_read_stops_before_a_corrupt_batch_and_refuses_it(tmp_path):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=10)  # one segment
    found = reported(log_)
    bad_offset = flip_byte_in_batch(log_.active_segment.log_path, 4)

    before = log_.read(0, 1 << 20)
    records = decode_records_all(before.records)
    assert [r.offset for r in records] == list(range(bad_offset))  # every intact batch before it, none after
    assert found == [(bad_offset, found[0][1])]
    with pytest.raises(StorageError, match="damaged .CRC mismatch"):
        log_.read(bad_offset + 2, 1 << 20)
    assert found[-1][0] == bad_offset + 2  # inside the bad batch: truncating there removes all of it


def open_unverified_logs(tmp_path, partitions: int, batches: int) -> dict:
    """Logs of topic t, filled, none of their segments known intact yet (all for the scrubber to check)."""
    logs = {}
    for partition in range(partitions):
        log_ = Log.open(str(tmp_path / f"t-{partition}"), "t", partition, CONFIG, recovery_point=None)
        fill(log_, batches=batches)
        log_.verified.clear()
        logs[("t", partition)] = log_
    return logs


def test_the_scrubber_finds_damage_in_an_open_log_and_verifies_the_rest(tmp_path):
    logs = open_unverified_logs(tmp_path, partitions=3, batches=40)
    found = reported(logs[("t", 1)])
    damaged = logs[("t", 1)].segments[1]
    bad_offset = flip_byte_in_batch(damaged.log_path, 2)

    scrubber = Scrubber(lambda: logs, bytes_per_step=2048)
    steps = 0
    while scrubber.passes == 0:
        assert scrubber.step() <= 2048 + 1024  # bounded work per step (at most one batch over)
        steps += 1
    assert steps > 3
    assert [offset for offset, _ in found] == [bad_offset]
    assert "scrubber" in found[0][1]
    for key, log_ in logs.items():
        expected = {s.base_offset for s in log_.segments if key != ("t", 1) or s is not damaged}
        assert set(log_.verified) == expected


def test_a_damaged_replica_truncated_to_the_bad_batch_reads_intact_again(tmp_path):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=60)
    bad_offset = flip_byte_in_batch(log_.segments[3].log_path, 1)
    log_.truncate_to(bad_offset)
    assert log_.log_end_offset == bad_offset
    log_.high_watermark = log_.log_end_offset
    # Reading everything back meets no damage any more.
    offset = 0
    while offset < log_.log_end_offset:
        chunk = log_.read(offset, 1 << 20).records
        last = list(iter_batches(chunk))[-1]
        offset = read_header(chunk, last[0]).next_offset
    assert offset == bad_offset


def test_a_scrubber_step_is_bounded_in_time_too_over_many_small_batches(tmp_path):
    """800 KiB of one-record batches is thousands of batch checks: a step stops on its clock, the next carries on."""
    log_ = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=64 << 20), recovery_point=None)
    fill(log_, batches=20_000, per_batch=1)
    log_.verified.clear()
    size = log_.size_bytes
    scrubber = Scrubber(lambda: {("t", 0): log_}, bytes_per_step=1 << 30)  # the default step: 0.25 ms
    first = scrubber.step()
    assert 0 < first < size  # the byte budget would have allowed all of it
    steps = 1
    while scrubber.passes == 0:
        scrubber.step()
        steps += 1
    assert steps > 2
    assert scrubber.bytes_checked >= size
    assert set(log_.verified) == {s.base_offset for s in log_.segments}


def test_a_scan_with_a_deadline_stops_at_the_first_batch_boundary_past_it(tmp_path):
    """The clock is read after every batch, not per slice: a step over small batches ends on time."""
    log_ = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(segment_bytes=64 << 20), recovery_point=None)
    fill(log_, batches=50, per_batch=1)
    segment = log_.segments[0]
    end, next_offset, problem = segment.scan(0, 0, segment.size_bytes, deadline=0.0)  # long past
    with open(segment.log_path, "rb") as f:
        first_position, _, first_size = next(iter_batches(f.read()))
    assert (end, next_offset, problem) == (first_position + first_size, 1, "")  # one batch: progress, then stop
    assert segment.scan(end, next_offset, segment.size_bytes) == (segment.size_bytes, 50, "")  # no deadline: all


def test_the_scrubber_starts_a_pass_at_most_once_per_interval_and_finds_damage_in_the_next(tmp_path):
    logs = open_unverified_logs(tmp_path, partitions=2, batches=30)
    found = reported(logs[("t", 0)])
    scrubber = Scrubber(lambda: logs, bytes_per_step=1 << 20, pass_interval_s=3600)
    assert scrubber.idle_for() == 0  # the first pass is due at once
    while scrubber.passes == 0:
        scrubber.step()
        if scrubber.passes == 0:
            assert scrubber.idle_for() == 0  # in a pass: the next step is due
    assert found == []
    # Between passes the broker need not call it until the next pass is due (an hour, not 25 ms).
    assert 3590 < scrubber.idle_for() <= 3600
    bad_offset = flip_byte_in_batch(logs[("t", 0)].segments[0].log_path, 1)
    # Between passes the scrubber reads nothing (before, it went round again at once, for ever).
    assert [scrubber.step() for _ in range(5)] == [0] * 5
    assert scrubber.passes == 1 and found == []
    scrubber.pass_interval_s = 0  # the interval is up
    assert scrubber.idle_for() == 0
    while scrubber.passes == 1:
        scrubber.step()
    assert [offset for offset, _ in found] == [bad_offset]


# -- damage outside the CRC (issue 40) ------------------------------------------------------------
# The CRC covers a batch from its attributes on: a flipped byte in the base offset went unseen, and consumers
# stopped at the batch without an error (the read stepped over it, or handed back offsets that went nowhere).


def flip_base_offset(segment_path: str, batch_index: int, byte: int, bit: int) -> int:
    """Flip ``bit`` of byte ``byte`` (0-7) of a batch's base offset; return its true base offset."""
    with open(segment_path, "rb") as f:
        data = f.read()
    position, base_offset, _size = list(iter_batches(data))[batch_index]
    with open(segment_path, "r+b") as f:
        f.seek(position + byte)
        f.write(bytes([data[position + byte] ^ (1 << bit)]))
    return base_offset


@pytest.mark.parametrize(("byte", "bit"), [(7, 1), (7, 4), (5, 0), (0, 6)], ids=["+-2", "+-16", "+-65536", "2^62"])
def test_a_flipped_base_offset_is_refused_on_read_and_truncation_removes_that_batch(tmp_path, byte, bit):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=10)  # one segment, 7 records a batch
    end = log_.log_end_offset
    found = reported(log_)
    bad_offset = flip_base_offset(log_.active_segment.log_path, 4, byte, bit)

    before = log_.read(0, 1 << 20)
    assert [r.offset for r in decode_records_all(before.records)] == list(range(bad_offset))
    assert found and found[0][0] == bad_offset and "base offset" in found[0][1]
    for offset in (bad_offset, bad_offset + 3):
        with pytest.raises(StorageError, match="damaged .*base offset"):
            log_.read(offset, 1 << 20)
    # Repair truncates at the reported offset: the damaged batch goes with everything after it.
    log_.truncate_to(bad_offset)
    assert log_.log_end_offset == bad_offset < end
    assert [r.offset for r in decode_records_all(log_.read(0, 1 << 20).records)] == list(range(bad_offset))


def test_a_flipped_base_offset_is_found_by_the_scan_of_a_load_and_the_scrubber(tmp_path):
    log_ = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    fill(log_, batches=60)
    middle = log_.segments[len(log_.segments) // 2]
    log_.close()
    bad_offset = flip_base_offset(middle.log_path, 1, 6, 3)  # + or - 2048: still in order for a compacted log
    reopened = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    offset, reason = reopened.corruption_found
    assert offset == bad_offset and "base offset" in reason
    reopened.close()

    scrubbed = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    found = reported(scrubbed)
    scrubber = Scrubber(lambda: {("t", 0): scrubbed}, bytes_per_step=1 << 20)
    for _ in range(20):
        scrubber.step()
    assert found and found[0][0] == bad_offset


def test_a_compacted_log_keeps_its_gaps_without_alarm(tmp_path):
    """A log that compacts may skip offsets between batches: only going back is damage there."""
    compacting = TopicConfig(segment_bytes=4096, index_interval_bytes=512, cleanup_policy="compact")
    log_ = Log.open(str(tmp_path), "t", 0, compacting, recovery_point=None)
    assert not log_.gapless
    fill(log_, batches=10)
    found = reported(log_)
    assert len(decode_records_all(log_.read(0, 1 << 20).records)) == 70 and found == []
    log_.close()
    # Switched to delete: the gaps compaction left stay legitimate (the marker file says so).
    reopened = Log.open(str(tmp_path), "t", 0, CONFIG, recovery_point=None)
    assert not reopened.gapless
    fresh = Log.open(str(tmp_path / "other"), "t", 1, CONFIG, recovery_point=None)
    assert fresh.gapless
