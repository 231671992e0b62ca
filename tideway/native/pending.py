"""What a send returns and waits on: a record's future, resolved when its batch is answered.

The producer (producer.py) appends records to an ``OpenBatch`` per partition and answers every record of a
batch at once, through the batch's future; a ``RecordFuture`` is one record's view of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import NamedTuple

from tideway.record.batch import BatchBuilder

# A record's framing in a batch: length, attributes, deltas and lengths (varints), at most.
RECORD_OVERHEAD_BYTES = 32


def record_size_estimate(key: bytes | None, value: bytes | None, headers) -> int:
    """An upper bound of the bytes a record adds to a batch (uncompressed)."""
    size = RECORD_OVERHEAD_BYTES + len(key or b"") + len(value or b"")
    for name, header_value in headers or ():
        size += 10 + len(name) + len(header_value or b"")
    return size


class RecordMetadata(NamedTuple):
    topic: str
    partition: int
    offset: int
    timestamp_ms: int


class RecordFuture:
    """Awaitable result of one ``send``: resolves to RecordMetadata."""

    __slots__ = ("_batch", "_offset_delta", "_timestamp_ms")

    def __init__(self, batch: OpenBatch, offset_delta: int, timestamp_ms: int) -> None:
        self._batch = batch
        self._offset_delta = offset_delta
        self._timestamp_ms = timestamp_ms

    def __await__(self):
        base_offset = yield from asyncio.shield(self._batch.future).__await__()
        batch = self._batch
        offset = base_offset + self._offset_delta if base_offset >= 0 else -1  # -1: acks=0, unknown
        return RecordMetadata(batch.topic, batch.partition, offset, self._timestamp_ms)

    def done(self) -> bool:
        return self._batch.future.done()

    def add_done_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` once the record is answered (acknowledged or failed), without a task to await it."""
        self._batch.future.add_done_callback(lambda _future: callback())

    def exception(self) -> BaseException | None:
        return self._batch.future.exception() if self._batch.future.done() else None


async def wait_records(futures: list[RecordFuture]) -> list[RecordMetadata | BaseException]:
    """Wait for every record in ``futures``: each one's metadata, or the error that failed it.

    One wait per batch rather than per record, for callers that send many
    records at once (a gateway answering a whole publish request).
    """
    pending = {id(f._batch): f._batch.future for f in futures if not f._batch.future.done()}
    if pending:
        await asyncio.wait(pending.values())
    out: list[RecordMetadata | BaseException] = []
    for record in futures:
        batch = record._batch
        error = batch.future.exception()
        if error is not None:
            out.append(error)
        else:
            base = batch.future.result()
            out.append(RecordMetadata(batch.topic, batch.partition, base + record._offset_delta if base >= 0 else -1,
                                      record._timestamp_ms))
    return out


class OpenBatch:
    """A batch of one partition, from its first record to its answer (its future: the base offset)."""

    __slots__ = ("topic", "partition", "builder", "future", "created_monotonic", "attempts", "data", "in_flight",
                 "last_error")

    def __init__(self, topic: str, partition: int, builder: BatchBuilder) -> None:
        self.topic = topic
        self.partition = partition
        self.builder = builder
        self.future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.created_monotonic = time.monotonic()
        self.attempts = 0
        self.data = b""
        self.in_flight = False
        self.last_error: BaseException | None = None
