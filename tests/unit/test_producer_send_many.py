"""Producer.send_many puts every record where ``send`` would, and each awaitable names its own record.

A unit test of the producer's accumulator alone (no sender task, no broker: the whole path is
tests/integration/test_broker_roundtrip.py and the gateway's tests): runs of records without a key or a
partition go into the sticky partition's batch in one loop (``BatchBuilder.extend``); a batch never
passes the size limit unless one record alone does; keyed records go by their key's hash, records with
a partition to that one; the sticky partition moves on when its batch is full.
"""

from __future__ import annotations

import random

from tideway.native.partitioner import partition_for_key
from tideway.native.producer import Producer
from tideway.record.batch import decode_records


class _Client:
    topics = {"t": [0, 1, 2]}
    request_timeout_s = 30


def _batches(producer: Producer) -> dict:
    """The producer's batches by id, closed (built) or still open (built here to read them)."""
    batches = {}
    for batch in list(producer._ready) + list(producer._open.values()):
        batches[id(batch)] = batch
    return batches


async def test_every_record_is_where_its_future_says_and_batches_keep_the_limit():
    rng = random.Random(7)
    producer = Producer(_Client(), acks=1, linger_ms=0, batch_size_bytes=2_000)
    records = []
    for i in range(400):
        kind = rng.random()
        value = b"value %d " % i + b"x" * rng.randrange(0, 300)
        if kind < 0.15:
            records.append((value, b"key %d" % rng.randrange(10), None, None))
        elif kind < 0.25:
            records.append((value, None, [("h", b"%d" % i)], rng.randrange(3)))
        else:
            records.append((value, None, None, None))
    records.append((b"y" * 5_000, None, None, None))  # larger than a batch: alone in one
    futures = await producer.send_many("t", records, batch_bytes_max=2_000)
    assert len(futures) == len(records)

    built = {}
    for key, batch in _batches(producer).items():
        data = batch.data or batch.builder.build()
        built[key] = (batch, {r.offset: r for r in decode_records(data)}, len(data))
    for (value, key, headers, partition), future in zip(records, futures, strict=True):
        batch, by_offset, _size = built[id(future._batch)]
        record = by_offset[future._offset_delta]
        assert (record.value, record.key, list(record.headers) or None) == (value, key, headers)
        if key is not None:
            assert batch.partition == partition_for_key(key, 3)
        elif partition is not None:
            assert batch.partition == partition
    for _batch, by_offset, size in built.values():
        assert size <= 2_000 or len(by_offset) == 1
    # The unkeyed records filled one partition's batch, then moved on, in their order.
    sticky = [f for (value, key, headers, partition), f in zip(records, futures, strict=True) if key is None and partition is None]
    assert len({f._batch.partition for f in sticky}) == 3
    for a, b in zip(sticky, sticky[1:], strict=False):
        if a._batch is b._batch:
            assert b._offset_delta > a._offset_delta
        else:
            assert a._batch.data  # the batch left behind was closed (built for sending)
