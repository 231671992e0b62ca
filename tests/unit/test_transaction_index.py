"""A partition's transactions from its log: open ones hold the last stable offset back, aborted ones are indexed
for read_committed readers, markers take an offset and are no sequence; kept across a clean restart (snapshot),
rebuilt after a crash, on a follower that copies the leader's batches, and after a truncation."""

from __future__ import annotations

import time

import pytest
from tideway_server.brokers.storage import Log, TopicConfig

from tideway.protocol.errors import CorruptRecordError
from tideway.record import BatchBuilder
from tideway.record.batch import ATTRIBUTE_TRANSACTIONAL, read_header
from tideway.record.markers import build_marker, read_marker


def transactional(producer_id: int, sequence: int, values: list[bytes], epoch: int = 0) -> bytearray:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                           flags=ATTRIBUTE_TRANSACTIONAL)
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return bytearray(builder.build())


def plain(values: list[bytes]) -> bytearray:
    builder = BatchBuilder()
    for value in values:
        builder.append(int(time.time() * 1000), None, value)
    return bytearray(builder.build())


def fill(log: Log) -> dict[str, int]:
    """Producer 1 commits offsets 0-1, producer 2 aborts 2-3 and 6, plain records between, producer 3 stays open."""
    at = {}
    log.append(transactional(1, 0, [b"a", b"b"]), leader_epoch=0)  # 0-1
    log.append(transactional(2, 0, [b"x", b"y"]), leader_epoch=0)  # 2-3
    at["commit_1"] = log.append_marker(1, 0, commit=True, coordinator_epoch=0, leader_epoch=0).base_offset  # 4
    log.append(plain([b"plain"]), leader_epoch=0)  # 5
    log.append(transactional(2, 2, [b"z"]), leader_epoch=0)  # 6
    at["abort_2"] = log.append_marker(2, 0, commit=False, coordinator_epoch=0, leader_epoch=0).base_offset  # 7
    at["open_3"] = log.append(transactional(3, 0, [b"pending"]), leader_epoch=0).base_offset  # 8
    log.append(plain([b"after"]), leader_epoch=0)  # 9
    log.high_watermark = log.log_end_offset
    return at


def check(log: Log, at: dict[str, int]) -> None:
    assert (at["commit_1"], at["abort_2"], at["open_3"]) == (4, 7, 8)
    assert log.last_stable_offset == 8  # producer 3's open transaction holds read_committed readers back
    assert [tuple(t) for t in log.aborted_between(0, 10)] == [(2, 2, 7)]
    assert log.aborted_between(8, 10) == [] and log.aborted_between(0, 2) == []
    assert [tuple(t) for t in log.aborted_between(5, 6)] == [(2, 2, 7)]  # it has records in the range


def test_open_committed_and_aborted_transactions_and_the_last_stable_offset(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None)
    at = fill(log)
    check(log, at)
    data = log.read(4, 1 << 20, max_offset=5).records
    assert read_marker(data) == (True, 0) and read_header(data).producer_id == 1
    # A marker is not a sequence: producer 2 goes on at 3.
    assert not log.append(transactional(2, 3, [b"again"]), leader_epoch=0).duplicate
    log.append_marker(2, 0, commit=True, coordinator_epoch=0, leader_epoch=0)
    log.append_marker(3, 0, commit=True, coordinator_epoch=0, leader_epoch=0)
    log.high_watermark = log.log_end_offset
    assert log.last_stable_offset == log.high_watermark  # nothing open
    with pytest.raises(CorruptRecordError):  # producers never send markers themselves
        log.append(bytearray(build_marker(9, 0, commit=True, coordinator_epoch=0, timestamp_ms=0)), leader_epoch=0)


@pytest.mark.parametrize("clean", [True, False], ids=["clean-restart", "after-a-crash"])
def test_the_index_survives_a_restart(tmp_path, clean):
    directory = str(tmp_path / "t-0")
    log = Log.open(directory, "t", 0, TopicConfig(), recovery_point=None)
    at = fill(log)
    if clean:
        log.close()
        again = Log.open(directory, "t", 0, TopicConfig(), recovery_point=None)
    else:
        log.flush()
        again = Log.open(directory, "t", 0, TopicConfig(), recovery_point=0)  # no snapshot: rebuilt from the log
    check(again, at)


def test_a_follower_copying_the_leaders_batches_keeps_the_same_index_and_rebuilds_it_when_it_truncates(tmp_path):
    leader = Log.open(str(tmp_path / "leader"), "t", 0, TopicConfig(), recovery_point=None)
    at = fill(leader)
    follower = Log.open(str(tmp_path / "follower"), "t", 0, TopicConfig(), recovery_point=None)
    follower.append_replicated(leader.read(0, 1 << 20, max_offset=leader.log_end_offset).records)
    follower.high_watermark = follower.log_end_offset
    check(follower, at)
    follower.high_watermark = 6
    follower.truncate_to(6)  # the abort marker and what follows go: producer 2's transaction is open again
    assert follower.last_stable_offset == 2 and follower.aborted_between(0, 10) == []


def test_aborted_transactions_below_the_log_start_are_forgotten(tmp_path):
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None)
    fill(log)
    log.delete_records(8)
    assert log.aborted_between(0, 10) == [] and log.last_stable_offset == 8
