"""The data's invariants are checked where they could break (brokers/invariants.py): each broken on purpose here,
on a real log on disk, raises InvariantError and changes nothing."""

from __future__ import annotations

import time

import pytest
from tideway_server.brokers.invariants import InvariantError
from tideway_server.brokers.queues.share_partition import QueueSettings, SharePartition
from tideway_server.brokers.replication import Partition
from tideway_server.brokers.replication.fetcher import ReplicaFetcher
from tideway_server.brokers.storage import Log, TopicConfig

from tideway.record import BatchBuilder


def _log(tmp_path) -> Log:
    return Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(), recovery_point=None)


def _batch(count: int = 1) -> bytearray:
    builder = BatchBuilder()
    for i in range(count):
        builder.append(int(time.time() * 1000), None, b"x%d" % i, None)
    return bytearray(builder.build())


def test_leader_epochs_only_grow(tmp_path):
    partition = Partition(1, _log(tmp_path))
    partition.become_leader(leader_epoch=5, partition_epoch=0, replicas=[1, 2], isr=[1, 2])
    with pytest.raises(InvariantError, match="epochs only grow"):
        partition.become_follower(leader_id=2, leader_epoch=4, partition_epoch=1, replicas=[1, 2], isr=[1, 2])
    assert partition.leader_epoch == 5 and partition.leader_id == 1


def test_a_log_never_takes_an_append_in_an_older_epoch(tmp_path):
    log = _log(tmp_path)
    log.append(_batch(3), leader_epoch=7)
    with pytest.raises(InvariantError, match="epoch 6 appending after epoch 7"):
        log.append(_batch(), leader_epoch=6)
    assert log.log_end_offset == 3


def test_committed_records_are_never_written_over(tmp_path):
    leader, follower = _log(tmp_path / "a"), _log(tmp_path / "b")
    leader.append(_batch(3), leader_epoch=0)
    follower.high_watermark = 2  # a bug elsewhere: a high watermark past the log end
    with pytest.raises(InvariantError, match="below the high watermark"):
        follower.append_replicated(leader.read(0, 1 << 20, max_offset=3).records)
    assert follower.log_end_offset == 0


def test_a_follower_never_truncates_committed_records_to_follow_a_leader(tmp_path):
    partition = Partition(2, _log(tmp_path))
    partition.become_follower(leader_id=1, leader_epoch=3, partition_epoch=0, replicas=[1, 2], isr=[1, 2])
    partition.log.append_replicated(_copy(tmp_path, epoch=3, count=10))
    partition.log.high_watermark = 8
    fetcher = ReplicaFetcher(broker_id=2, leader_id=1, address=lambda _id: None, partitions=lambda: [partition],
                             on_append=lambda _p: None)
    with pytest.raises(InvariantError, match="below the high watermark 8"):
        fetcher._truncate_divergent(partition, leader_epoch=3, leader_end_offset=5)
    assert partition.log.log_end_offset == 10
    fetcher._truncate_divergent(partition, leader_epoch=3, leader_end_offset=9)  # above it: allowed
    assert partition.log.log_end_offset == 9


def _copy(tmp_path, *, epoch: int, count: int) -> bytes:
    """``count`` batches of one record each, as a leader's log holds them (truncation cuts whole batches)."""
    source = _log(tmp_path / "source")
    for _ in range(count):
        source.append(_batch(), leader_epoch=epoch)
    return source.read(0, 1 << 20, max_offset=count).records


def test_a_record_is_locked_by_one_receiver_and_unlocked_once():
    share = SharePartition(0, QueueSettings(retry_backoff_ms=0))
    share.add_records([(0, None, 0), (1, None, 0)], 2)
    (first, second) = share.acquire(10, 2)
    share.check()
    with pytest.raises(InvariantError, match="locking offset 0, which is acquired"):
        share._lock(share.entry(0), 0, 11, 1000, [])
    share.release(0, first.delivery_count, 12)
    with pytest.raises(InvariantError, match="unlocking offset 0, which is available"):
        share._unlock(share.entry(0), 0, 13, 0)
    assert share.in_flight == 1
    share.check()
    share.in_flight = 2  # a bug elsewhere: the count drifts from the window
    with pytest.raises(InvariantError, match="1 records locked, 2 counted"):
        share.check()
