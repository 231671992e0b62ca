"""The consumer: reads assigned partitions from a position, with prefetching.

A fetcher task keeps one fetch per broker in flight for the assigned
partitions whose buffers have room, so the next records arrive while the
application handles the current ones. A fetch that waited for records stays
open and answers again as more come (up to ``fetch_answers_max`` answers, or
``fetch_max_wait_ms``, whichever ends it first): a consumer that keeps up is
not between fetches when a message comes, so the message does not wait for
the next request. A change of assignment or a seek takes effect when the
fetch in flight ends. Batches are buffered raw (bounded by
``buffer_bytes_max``) and decoded in ``getmany``; each batch's CRC is checked
on the way in. Positions: the *fetch position* runs ahead with prefetching;
the *position* is the next offset ``getmany`` will return, and ``seek`` moves
both (dropping what was buffered for that partition).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from typing import Literal

from crc32c import crc32c

from tideway.aio import Signal, cancel_and_wait
from tideway.native.client import TidewayClient
from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.protocol.messages import ApiKey
from tideway.record.batch import (
    ATTRIBUTE_CONTROL,
    CRC_START,
    Record,
    decode_records,
    iter_batches,
    read_header,
)
from tideway.record.markers import AbortedFilter
from tideway.retry import Backoff

__all__ = ["Consumer", "TopicPartition"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
OffsetReset = Literal["earliest", "latest", "none"]


class _PartitionState:
    __slots__ = ("position", "fetch_position", "buffer", "head", "buffered_bytes", "high_watermark", "error")

    def __init__(self, position: int) -> None:
        self.position = position
        self.fetch_position = position
        # Fetched batches not yet returned; an int stands for batches not delivered (a transaction's marker or
        # aborted records): the offset after them, where the position moves when the reader reaches it.
        self.buffer: deque[bytes | int] = deque()
        self.head: list[Record] | None = None  # buffer[0]'s records not yet returned, once decoded
        self.buffered_bytes = 0
        self.high_watermark = -1
        self.error: errors.TidewayError | None = None


class Consumer:
    def __init__(
        self,
        client: TidewayClient | str,
        *,
        auto_offset_reset: OffsetReset = "latest",
        fetch_max_wait_ms: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_bytes: int = 50 << 20,
        fetch_answers_max: int = 100,
        partition_fetch_bytes_max: int = 4 << 20,
        buffer_bytes_max: int = 32 << 20,
        check_crcs: bool = True,
        request_timeout_ms: int = 30_000,
        api_key: str | None = None,
        isolation_level: str = "read_committed",
    ) -> None:
        self._own_client = isinstance(client, str)
        self.client = (TidewayClient(client, request_timeout_ms=request_timeout_ms, api_key=api_key)
                       if isinstance(client, str) else client)
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.fetch_answers_max = fetch_answers_max
        self.partition_fetch_bytes_max = partition_fetch_bytes_max
        self.buffer_bytes_max = buffer_bytes_max
        self.check_crcs = check_crcs
        if isolation_level not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation_level is read_committed or read_uncommitted, not {isolation_level!r}")
        # read_committed (the default, as librdkafka's): no record of a transaction still open or aborted.
        self.isolation_level = m.READ_COMMITTED if isolation_level == "read_committed" else m.READ_UNCOMMITTED
        self._partitions: dict[TopicPartition, _PartitionState] = {}
        self._data = Signal()
        self._room = asyncio.Event()
        self._fetcher: asyncio.Task | None = None

    async def start(self) -> None:
        if self._own_client:
            await self.client.start()
        self._fetcher = asyncio.get_running_loop().create_task(self._fetch_loop())

    async def stop(self) -> None:
        await cancel_and_wait(self._fetcher)
        self._fetcher = None
        if self._own_client:
            await self.client.close()

    async def __aenter__(self) -> Consumer:
        await self.start()
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.stop()

    # -- assignment and positions ----------------------------------------------------

    async def assign(self, partitions: list[TopicPartition], *, start: str | int = "committed") -> None:
        """Read exactly these partitions, from ``start``: "earliest", "latest",
        an offset, or "@<ms>" (first record at or after that time).
        "committed" (the default) applies ``auto_offset_reset`` until groups exist.
        """
        self._partitions = {}
        await self.add({tp: start for tp in partitions})

    async def add(self, partitions: dict[TopicPartition, str | int]) -> None:
        """Start reading more partitions, each from its start (see ``assign``)."""
        # Every start is looked up before any partition is fetched: a partition fetched from a
        # placeholder position while its start was being looked up had its records served, then
        # dropped by the seek, and served again (metered twice).
        offsets = {}
        for tp, start in partitions.items():
            await self.client.partitions_for(tp[0])
            offsets[tp] = await self._offset_of(tp, start)
        for tp, offset in offsets.items():
            self._partitions[tp] = _PartitionState(offset)
        self._room.set()

    def remove(self, partitions) -> None:
        """Stop reading these partitions and drop what was buffered for them."""
        for tp in partitions:
            self._partitions.pop(tp, None)

    def assignment(self) -> list[TopicPartition]:
        return list(self._partitions)

    async def seek(self, tp: TopicPartition, start: str | int) -> None:
        """Move ``tp`` to ``start`` (see ``assign``), dropping what was buffered."""
        offset = await self._offset_of(tp, start)
        if tp not in self._partitions:
            raise errors.InvalidRequestError(f"{tp[0]}-{tp[1]} is not assigned")
        self._partitions[tp] = _PartitionState(offset)
        self._room.set()

    async def _offset_of(self, tp: TopicPartition, start: str | int) -> int:
        topic, partition = tp
        if start == "committed":
            start = "earliest" if self.auto_offset_reset == "earliest" else "latest"
        if isinstance(start, int):
            return start
        if start == "earliest":
            return (await self.client.list_offset(topic, partition, m.EARLIEST_TIMESTAMP))[0]
        if start == "latest":
            return (await self.client.list_offset(topic, partition, m.LATEST_TIMESTAMP))[0]
        if isinstance(start, str) and start.startswith("@"):
            offset, _ = await self.client.list_offset(topic, partition, int(start[1:]))
            if offset < 0:  # nothing that late yet: wait at the end
                offset, _ = await self.client.list_offset(topic, partition, m.LATEST_TIMESTAMP)
            return offset
        raise ValueError(f"bad start position {start!r}: use earliest, latest, an offset or @<ms>")

    def position(self, tp: TopicPartition) -> int:
        return self._partitions[tp].position

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._partitions[tp].high_watermark

    # -- reading --------------------------------------------------------------------------

    async def getmany(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        """Records that arrived for each partition, waiting up to ``timeout_ms`` for any.

        Raises a partition's fetch error (e.g. OffsetOutOfRangeError with
        auto_offset_reset="none") once, when it is the only thing to return.
        """
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            out = self._drain(max_records)
            if out:
                return out
            for _tp, state in self._partitions.items():
                if state.error is not None:
                    error, state.error = state.error, None
                    raise error
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {}
            self._data.clear()
            if not await self._data.wait(remaining):
                return {}

    async def getone(self, timeout_ms: int = 1000) -> Record | None:
        records = await self.getmany(timeout_ms, max_records=1)
        for batch in records.values():
            return batch[0]
        return None

    def _drain(self, max_records: int | None) -> dict[TopicPartition, list[Record]]:
        out: dict[TopicPartition, list[Record]] = {}
        budget = max_records if max_records is not None else 1 << 62
        for tp, state in self._partitions.items():
            records: list[Record] = []
            while state.buffer and budget > 0:
                if isinstance(state.buffer[0], int):  # batches not delivered: the position moves past them
                    state.position = max(state.position, state.buffer.popleft())
                    continue
                decoded = state.head
                if decoded is None:
                    decoded = decode_records(state.buffer[0])
                    if decoded and decoded[0].offset < state.position:
                        decoded = [r for r in decoded if r.offset >= state.position]
                if len(decoded) > budget:
                    # Keep the rest decoded: a batch split by max_records is not decoded again.
                    decoded, state.head = decoded[:budget], decoded[budget:]
                    state.position = decoded[-1].offset + 1
                else:
                    raw = state.buffer.popleft()
                    state.head = None
                    state.buffered_bytes -= len(raw)
                    state.position = max(state.position, read_header(raw).next_offset)
                    self._room.set()
                records.extend(decoded)
                budget -= len(decoded)
            if records:
                out[tp] = records
        return out

    # -- the fetcher task -------------------------------------------------------------------

    async def _fetch_loop(self) -> None:
        backoff = Backoff(initial_s=0.05, max_s=1.0)
        while True:
            wanted = [tp for tp, s in self._partitions.items() if s.buffered_bytes < self.buffer_bytes_max and s.error is None]
            if not wanted:
                self._room.clear()
                await self._room.wait()
                continue
            by_leader: dict[int, list[TopicPartition]] = {}
            try:
                for tp in wanted:
                    by_leader.setdefault(self.client.leader_for(*tp), []).append(tp)
                if len(by_leader) == 1:
                    # One leader, awaited in this task: the next fetch is written on the loop turn
                    # that hands the records to getmany, right after it, where gather's tasks took
                    # three turns more (~70 µs on this machine; a message that came while the
                    # consumer was between fetches waited for them, a third of the latency phase's).
                    [(leader, tps)] = by_leader.items()
                    await self._fetch_from(leader, tps)
                else:
                    # Every fetch ends before any is retried: one left running would race its retry,
                    # and the records of the loser would be served (and metered) but never delivered.
                    outcomes = await asyncio.gather(*(self._fetch_from(leader, tps) for leader, tps in by_leader.items()),
                                                    return_exceptions=True)
                    failures = [outcome for outcome in outcomes if isinstance(outcome, BaseException)]
                    if failures:
                        raise failures[0]
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except errors.TidewayError as exc:
                log.debug("fetch failed (%s); refreshing metadata after a pause", exc)
                await backoff.wait()
                try:
                    await self.client.refresh_metadata()
                except errors.TidewayError:
                    pass

    async def _fetch_from(self, leader: int, tps: list[TopicPartition]) -> None:
        connection = await self.client.connection(leader)
        # Partitions revoked (or sought elsewhere) while the connection was being made are not fetched.
        positions = {tp: state.fetch_position for tp in tps if (state := self._partitions.get(tp)) is not None}
        if not positions:
            return
        tps = list(positions)
        # The answers of a streaming fetch together fit what the buffers have room for.
        room = sum(self.buffer_bytes_max - self._partitions[tp].buffered_bytes for tp in tps)
        request = m.FetchRequest(
            max_wait_ms=self.fetch_max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=max(1, min(self.fetch_max_bytes, room)),
            answers_max=self.fetch_answers_max,
            isolation_level=self.isolation_level,
            partitions=[
                m.FetchPartition(topic=t, partition=p, fetch_offset=positions[(t, p)], partition_max_bytes=self.partition_fetch_bytes_max)
                for t, p in tps
            ],
        )
        failed: list[tuple[TopicPartition, _PartitionState, m.FetchPartitionResult]] = []
        await connection.request(
            ApiKey.FETCH, request, timeout_s=self.client.read_timeout_s(self.fetch_max_wait_ms / 1000),
            # Records are taken in the read callback: getmany has them a loop turn sooner.
            on_answer=lambda response: self._take(response, positions, failed),
        )
        retry: errors.TidewayError | None = None
        for tp, state, result in failed:
            # The other partitions' records are kept first: they were served.
            retry = await self._handle_fetch_error(tp, state, result) or retry
        if retry is not None:
            raise retry

    def _take(self, response: m.FetchResponse, positions: dict[TopicPartition, int],
              failed: list[tuple[TopicPartition, _PartitionState, m.FetchPartitionResult]]) -> None:
        """Buffer a fetch's records for getmany; list the partitions that answered with an error in ``failed``."""
        arrived = False
        for result in response.partitions:
            tp = (result.topic, result.partition)
            state = self._partitions.get(tp)
            if state is None or state.fetch_position != positions.get(tp):
                continue  # reassigned or sought while the fetch was out
            if result.error_code:
                failed.append((tp, state, result))
                continue
            state.high_watermark = result.high_watermark
            records = result.records
            if not records:
                continue
            keep = AbortedFilter(result.aborted_transactions) if result.aborted_transactions else None
            for position, _base_offset, size in iter_batches(records):
                header = read_header(records, position)
                delivered = keep.delivers(header) if keep is not None else not header.attributes & ATTRIBUTE_CONTROL
                if not delivered:  # a transaction's marker, or aborted records: offsets taken, nothing to return
                    state.buffer.append(header.next_offset)
                    state.fetch_position = positions[tp] = header.next_offset
                    arrived = True
                    continue
                if self.check_crcs and crc32c(memoryview(records)[position + CRC_START : position + size]) != header.crc:
                    state.error = errors.CorruptRecordError(
                        f"batch at offset {header.base_offset} of {tp[0]}-{tp[1]} fails its CRC"
                    )
                    break
                state.buffer.append(records[position : position + size] if size != len(records) else records)
                state.buffered_bytes += size
                state.fetch_position = positions[tp] = header.next_offset  # a streaming fetch's next answer starts there
                arrived = True
        if arrived:
            self._data.set()

    async def _handle_fetch_error(self, tp: TopicPartition, state: _PartitionState,
                                  result: m.FetchPartitionResult) -> errors.TidewayError | None:
        """Deal with one partition's error; return it if the fetch should be retried."""
        error = errors.error_for_code(result.error_code, result.error_message)
        if isinstance(error, errors.OffsetOutOfRangeError) and self.auto_offset_reset != "none":
            log.warning("%s-%d: offset %d out of range; resetting to %s", tp[0], tp[1], state.fetch_position, self.auto_offset_reset)
            await self.seek(tp, self.auto_offset_reset)
            return None
        if error.retriable:
            return error
        state.error = error
        self._data.set()
        return None
