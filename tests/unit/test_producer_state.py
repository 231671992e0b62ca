"""Idempotent producers on the partition log (issue 3)."""

import os

import pytest
from tideway_server.brokers.storage import Log, TopicConfig

from tideway.protocol import errors
from tideway.record import BatchBuilder


def producer_batch(producer_id: int, sequence: int, count: int, epoch: int = 0) -> bytes:
    builder = BatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    for i in range(count):
        builder.append(1, None, b"p%d-s%d" % (producer_id, sequence + i))
    return builder.build()


def open_log(path, recovery_point=None) -> Log:
    return Log.open(str(path), "t", 0, TopicConfig(), recovery_point=recovery_point)


def test_a_resent_batch_gets_its_first_offsets_and_is_not_written_again(tmp_path):
    log = open_log(tmp_path / "t-0")
    first = log.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=0)
    log.append(bytearray(producer_batch(8, 0, 3)), leader_epoch=0)
    again = log.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=0)
    assert again.duplicate and (again.base_offset, again.last_offset) == (first.base_offset, first.last_offset) == (0, 4)
    assert log.log_end_offset == 8
    assert log.append(bytearray(producer_batch(7, 5, 2)), leader_epoch=0).base_offset == 8


def test_sequence_gaps_and_old_epochs_are_refused_and_change_nothing(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(bytearray(producer_batch(7, 0, 5, epoch=1)), leader_epoch=0)
    with pytest.raises(errors.OutOfOrderSequenceError):
        log.append(bytearray(producer_batch(7, 9, 1, epoch=1)), leader_epoch=0)
    with pytest.raises(errors.InvalidProducerEpochError):
        log.append(bytearray(producer_batch(7, 5, 1, epoch=0)), leader_epoch=0)
    assert log.log_end_offset == 5
    # A new epoch starts again at sequence 0.
    assert log.append(bytearray(producer_batch(7, 0, 1, epoch=2)), leader_epoch=0).base_offset == 5


@pytest.mark.parametrize("shutdown", ["clean", "crash"])
def test_producer_state_survives_a_restart(tmp_path, shutdown):
    log = open_log(tmp_path / "t-0")
    log.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=0)
    log.flush()
    if shutdown == "clean":
        log.close()
        assert os.path.exists(tmp_path / "t-0" / "producer-snapshot")
        reopened = open_log(tmp_path / "t-0")
    else:
        for segment in log.segments:
            os.close(segment.fd)
            segment.fd = -1
        reopened = open_log(tmp_path / "t-0", recovery_point=0)
    assert reopened.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=0).duplicate
    assert reopened.log_end_offset == 5


def test_truncation_forgets_the_batches_it_removes(tmp_path):
    log = open_log(tmp_path / "t-0")
    log.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=0)
    log.append(bytearray(producer_batch(7, 5, 5)), leader_epoch=0)
    log.truncate_to(5)
    # The second batch is gone, so its resend is written, at the same offsets.
    result = log.append(bytearray(producer_batch(7, 5, 5)), leader_epoch=1)
    assert not result.duplicate and result.base_offset == 5


def test_followers_learn_producer_state_from_replicated_batches(tmp_path):
    leader = open_log(tmp_path / "leader")
    follower = open_log(tmp_path / "follower")
    data = bytearray(producer_batch(7, 0, 5))
    leader.append(data, leader_epoch=3)
    follower.append_replicated(bytes(data))
    assert follower.append(bytearray(producer_batch(7, 0, 5)), leader_epoch=4).duplicate
