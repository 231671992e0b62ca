"""acks=all on a leader: an acknowledgement means min.insync.replicas replicas hold the records.

A produce is refused up front when the ISR is already too small; records appended while it was
large enough and committed only after it shrank (the followers fell out before fetching them) are
answered NOT_ENOUGH_REPLICAS_AFTER_APPEND, as Kafka does, never acknowledged. A real log on disk,
one Partition, no broker.
"""

from __future__ import annotations

import time

import pytest
from tideway_server.brokers.replication import Partition
from tideway_server.brokers.storage import Log, TopicConfig

from tideway.protocol import errors
from tideway.record import BatchBuilder


def _leader(tmp_path, isr: list[int]) -> Partition:
    log = Log.open(str(tmp_path / "t-0"), "t", 0, TopicConfig(min_insync_replicas=2), recovery_point=None)
    partition = Partition(1, log)
    partition.become_leader(leader_epoch=0, partition_epoch=0, replicas=[1, 2, 3], isr=isr)
    return partition


def _batch() -> bytearray:
    builder = BatchBuilder()
    builder.append(int(time.time() * 1000), None, b"x", None)
    return bytearray(builder.build())


async def test_records_committed_after_the_isr_shrank_below_min_insync_are_not_acknowledged(tmp_path):
    partition = _leader(tmp_path, isr=[1, 2, 3])
    _appended, committed = partition.append_as_leader(_batch(), acks=-1)
    assert not committed.done()
    partition.update_isr([1], partition_epoch=1)  # both followers dropped before fetching the record
    assert partition.log.high_watermark == 1  # committed on the leader alone
    with pytest.raises(errors.NotEnoughReplicasAfterAppendError):
        committed.result()
    with pytest.raises(errors.NotEnoughReplicasError):  # and the next produce is refused up front
        partition.append_as_leader(_batch(), acks=-1)


async def test_records_committed_by_enough_replicas_are_acknowledged(tmp_path):
    partition = _leader(tmp_path, isr=[1, 2, 3])
    _appended, committed = partition.append_as_leader(_batch(), acks=-1)
    partition.update_isr([1, 2], partition_epoch=1)  # replica 3 dropped; replica 2 has not fetched yet
    assert not committed.done()
    partition.record_follower_fetch(2, 1)  # replica 2 holds offset 0
    assert committed.done() and committed.result() is None
