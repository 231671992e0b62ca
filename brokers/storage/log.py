"""A partition replica's log: an ordered list of segments with one active tail.

Offsets are dense and assigned here, at append. The log start offset is the
base offset of the first segment (retention removes whole segments), or more
after records were deleted up to an offset (``delete_records``: Kafka's
DeleteRecords, a queue's purge): that offset is kept in ``log-start-offset``,
written and fsynced before the answer, and reads below it are out of range
although the rest of its segment stays until the segment can go whole. The log
end offset (LEO) is the next offset to be assigned. ``high_watermark`` is kept
by the replica layer above (for a single replica it follows the LEO); reads
for consumers stop at it.

Integrity: every read checks the CRC of the batches it returns, so a batch
damaged on disk is never served (``on_corruption`` is told, and the read
stops before it). Segments whose bytes were read back and found intact are
listed in ``verified-segments`` with their size and modification time; on
open every other segment is CRC-checked (a clean-shutdown marker says the
broker stopped properly, not that the bytes are intact). The scrubber
(``scrubber.py``) re-reads everything in the background at a bounded rate.

Ownership: a Log is used by the broker's event-loop thread. ``flush`` may run
in a flusher thread; it only fsyncs file descriptors and then publishes the
offset it made durable.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from bisect import bisect_right
from collections import deque
from collections.abc import Callable
from typing import NamedTuple

from tideway_server.brokers.invariants import InvariantError
from tideway_server.brokers.storage.config import TopicConfig
from tideway_server.brokers.storage.epochs import LeaderEpochCache
from tideway_server.brokers.storage.files import fsync_directory, write_atomically
from tideway_server.brokers.storage.open_files import OpenFiles
from tideway_server.brokers.storage.producers import ProducerStateTable
from tideway_server.brokers.storage.segment import Segment, header_problem
from tideway_server.brokers.storage.transactions import AbortedTransaction, TransactionIndex

from tideway.protocol import errors
from tideway.protocol.errors import (
    CorruptRecordError,
    MessageTooLargeError,
    OffsetOutOfRangeError,
    StorageError,
)
from tideway.record.batch import (
    ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL,
    BatchHeader,
    decode_records,
    first_corrupt_batch,
    stamp_batch,
    validate_batches,
)
from tideway.record.markers import build_marker, read_marker

__all__ = ["AppendResult", "Log", "ReadResult"]

log = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.log$")
_SWAP_FILE = re.compile(r"^(\d{20})\.log\.swap-(\d+)$")  # a compacted copy replacing segments (cleaner.swap)
_SEGMENT_FILES = re.compile(r"^(\d{20})\.(log|index|timeindex)$")  # a segment's file or one of its indexes
_VERIFIED_FILE = "verified-segments"
_START_FILE = "log-start-offset"  # the first offset kept, when records were deleted up to it (delete_records)
_GAPS_FILE = "compacted"  # present once the log has compacted: offsets may have gaps from then on
TAIL_BYTES_MAX = 64 << 10  # appends up to this size are kept in memory while they end the log (Log._tail)

# Told (log, first offset that cannot be served intact, what is wrong) when a
# read, a load or the scrubber finds a batch that fails its CRC.
CorruptionHandler = Callable[["Log", int, str], None]


def _log_corruption(log_: Log, offset: int, reason: str) -> None:
    log.error("%s-%d: corrupt data from offset %d: %s", log_.topic, log_.partition, offset, reason)


class AppendResult(NamedTuple):
    base_offset: int
    last_offset: int
    record_count: int
    size_bytes: int
    duplicate: bool = False  # an idempotent producer's resend: nothing was written


class ReadResult(NamedTuple):
    records: bytes
    high_watermark: int
    log_start_offset: int
    log_end_offset: int


class Log:
    """The segments of one partition replica in one directory."""

    def __init__(self, directory: str, topic: str, partition: int, config: TopicConfig) -> None:
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self.segments: list[Segment] = []
        self._base_offsets: list[int] = []
        self.high_watermark = 0
        self._deleted_below = 0  # records below this were deleted (delete_records), whatever segment holds them
        # What this replica appended as leader, batch by batch, while someone counts it (usage
        # metering): (base offset, records, bytes), complete from offset ``appended_from``.
        # Counting from here costs nothing; reading the batches back cost a read and a CRC
        # check of everything appended, all in one event-loop turn (tail latency).
        self.appended: deque[tuple[int, int, int]] | None = None
        self.appended_from = 0
        self.flushed_offset = 0  # every offset below this is on disk (fsynced)
        # The batches of the last append as leader, while they end the log: (base offset, next
        # offset, bytes). A consumer waiting at the log's end is served them from here, without a
        # read and CRC check of what was checked a moment ago (``read``). Small appends only.
        # Served only while it ends the log (a truncation makes it stale until the next append
        # replaces it); what may rewrite the log up to the same end drops it (replicated appends,
        # compaction).
        self._tail: tuple[int, int, bytes] | None = None
        self.epochs = LeaderEpochCache(directory)
        self.open_files: OpenFiles | None = None  # the broker's LRU of segment files (None: all stay open)
        self.producers = ProducerStateTable(directory)
        self.transactions = TransactionIndex(directory)
        self.last_flush_monotonic = time.monotonic()
        # base offset -> (size, mtime ns) of segments read back and found intact
        self.verified: dict[int, tuple[int, int]] = {}
        self.corruption_found: tuple[int, str] | None = None  # (offset, reason) found while loading
        # True when no batch can follow another with a gap: the topic does not compact and never did here (a
        # log that compacted once keeps a marker file, as its gaps stay). Offsets are then checked exactly.
        self.gapless = not config.compact and not os.path.exists(os.path.join(directory, _GAPS_FILE))
        self.on_corruption: CorruptionHandler = _log_corruption

    @classmethod
    def open(
        cls, directory: str, topic: str, partition: int, config: TopicConfig, *, recovery_point: int | None,
        open_files: OpenFiles | None = None,
    ) -> Log:
        """Open (or create) the log in ``directory``.

        ``recovery_point`` None means the broker shut down cleanly and the
        files are trusted; otherwise segments from the one holding the recovery
        point onward are CRC-checked and cut at the first torn or corrupt batch.
        """
        os.makedirs(directory, exist_ok=True)
        instance = cls(directory, topic, partition, config)
        instance.open_files = open_files
        if config.compact:
            instance._mark_gaps()
        instance._load(recovery_point)
        return instance

    def _finish_swaps(self) -> None:
        """Put in place a compacted copy a crash left halfway (cleaner.swap): the segments it covers go first."""
        for name in sorted(os.listdir(self.directory)):
            match = _SWAP_FILE.match(name)
            if match is None:
                continue
            first, end = int(match.group(1)), int(match.group(2))
            for other in os.listdir(self.directory):
                covered = _SEGMENT_FILES.match(other)
                if covered is not None and first <= int(covered.group(1)) < end:
                    os.unlink(os.path.join(self.directory, other))
            os.replace(os.path.join(self.directory, name), os.path.join(self.directory, f"{first:020d}.log"))
            fsync_directory(self.directory)
            log.warning("%s-%d: finished putting compacted segment %d in place (offsets below %d)", self.topic,
                        self.partition, first, end)

    def replaced_segments(self) -> None:
        """``segments`` changed in the middle (compaction merged some): look-ups follow."""
        self._base_offsets = [segment.base_offset for segment in self.segments]
        self._tail = None

    def _load(self, recovery_point: int | None) -> None:
        self._finish_swaps()
        base_offsets = sorted(
            int(match.group(1)) for name in os.listdir(self.directory) if (match := _SEGMENT_FILE.match(name))
        )
        for name in os.listdir(self.directory):
            if name.endswith((".tmp", ".cleaned")):  # unfinished atomic writes or compactions
                os.unlink(os.path.join(self.directory, name))
        recover_from = None
        if recovery_point is not None and base_offsets:
            slot = max(bisect_right(base_offsets, recovery_point) - 1, 0)
            recover_from = base_offsets[slot]
        verified = self._read_verified()
        truncated_at: int | None = None
        for base_offset in base_offsets:
            if self.segments:
                self.segments[-1].seal()
            segment = Segment(self.directory, base_offset, self.config.index_interval_bytes, gapless=self.gapless)
            if truncated_at is not None:
                log.warning(
                    "deleting segment %s: it follows corruption in an earlier segment", segment.log_path
                )
                segment.delete()
                continue
            recover = recover_from is not None and base_offset >= recover_from
            truncated = segment.load(recover=recover)
            self.segments.append(segment)
            segment.track(self.open_files)  # as it goes: a log of 10,000 segments never holds 10,000 files
            if truncated:
                truncated_at = segment.next_offset
                if not recover and self.corruption_found is None:
                    # Headers that do not add up in a segment that should be whole.
                    self.corruption_found = (segment.next_offset, f"{truncated} bytes cut from {segment.log_path}")
                continue
            stamp = segment.modification_stamp()
            if not recover and verified.get(base_offset) != stamp:
                # Not proven intact since it was last written: check every batch's CRC.
                _position, offset, problem = segment.scan(0, segment.base_offset, segment.size_bytes)
                if problem:
                    if self.corruption_found is None:
                        self.corruption_found = (offset, f"{problem} in {segment.log_path}")
                    continue
            self.verified[base_offset] = stamp
        if not self.segments:
            self.segments.append(Segment(self.directory, 0, self.config.index_interval_bytes, gapless=self.gapless))
            self.active_segment.track(self.open_files)
        self.active_segment.unseal()  # sealed above if the segments after it were dropped
        self.replaced_segments()
        self.epochs.truncate_from_end(self.log_end_offset)
        if not self.epochs.entries and self.log_end_offset > self.log_start_offset:
            self._rebuild_epochs()
        elif recovery_point is not None and self._last_epoch() not in (None, self.epochs.latest_epoch):
            # After a crash the cache may lack the latest epochs (written without an fsync).
            log.info("%s-%d: leader epoch cache behind the log; rebuilding it", self.topic, self.partition)
            self.epochs.entries = []
            self._rebuild_epochs()
        # (both snapshots are consumed: a crash before the next clean shutdown leaves neither)
        producers_loaded = self.producers.load_snapshot(self.log_end_offset)
        if not self.transactions.load_snapshot(self.log_end_offset) or not producers_loaded:
            self._rebuild_batch_state()
        self.high_watermark = self.log_end_offset
        self._deleted_below = min(self._read_start(), self.log_end_offset)
        self._delete_segments_below(self._deleted_below)  # a crash may have come between the checkpoint and the deletes
        self.flushed_offset = self.log_end_offset if recovery_point is None else min(
            recovery_point, self.log_end_offset
        )
        if self.verified != verified:
            self.write_verified()

    # -- integrity -----------------------------------------------------------------

    def _read_verified(self) -> dict[int, tuple[int, int]]:
        try:
            with open(os.path.join(self.directory, _VERIFIED_FILE)) as f:
                return {int(base): (size, mtime) for base, (size, mtime) in json.load(f).items()}
        except (OSError, ValueError, TypeError):
            return {}

    def write_verified(self) -> None:
        """Write the list of intact segments (no fsync: losing it only means checking them again)."""
        alive = {segment.base_offset for segment in self.segments}
        self.verified = {base: stamp for base, stamp in self.verified.items() if base in alive}
        contents = json.dumps({str(base): list(stamp) for base, stamp in self.verified.items()})
        write_atomically(os.path.join(self.directory, _VERIFIED_FILE), contents.encode(), sync_directory=False,
                         sync_file=False)

    def mark_verified(self, segment: Segment, stamp: tuple[int, int]) -> None:
        """The scrubber read ``segment`` back whole and found it intact, as of ``stamp``."""
        if self.verified.get(segment.base_offset) == stamp:
            return
        if segment in self.segments and segment.modification_stamp() == stamp:
            self.verified[segment.base_offset] = stamp
            self.write_verified()

    def _check_served(self, data: bytes, offset: int, expected_base: int) -> bytes:
        """``data`` up to its first damaged batch (failing its CRC, or with offsets that do not run on: see
        first_corrupt_batch); StorageError if that is the first one."""
        bad = first_corrupt_batch(data, expected_base, self.gapless)
        if bad is None:
            return data
        position, offset_before, problem = bad
        first_bad = offset if position == 0 else offset_before
        self.on_corruption(self, first_bad, problem)
        if position == 0:
            raise StorageError(
                f"{self.topic}-{self.partition}: the data at offset {offset} on this broker is damaged "
                f"({problem}); it is not served, and another replica takes over when one is in sync"
            )
        return data[:position]

    # -- properties -----------------------------------------------------------

    def set_config(self, config: TopicConfig) -> None:
        """New topic settings; a log that compacts is marked as having gaps for good."""
        if config.compact and not self.config.compact:
            self._mark_gaps()
        self.config = config

    def _mark_gaps(self) -> None:
        path = os.path.join(self.directory, _GAPS_FILE)
        if not os.path.exists(path):
            write_atomically(path, b"this log has been compacted: batches may follow each other with gaps\n")
        self.gapless = False
        for segment in self.segments:
            segment.gapless = False

    @property
    def active_segment(self) -> Segment:
        return self.segments[-1]

    @property
    def log_start_offset(self) -> int:
        base = self.segments[0].base_offset
        return base if base >= self._deleted_below else self._deleted_below

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(segment.size_bytes for segment in self.segments)

    # -- writing ----------------------------------------------------------------

    def append(self, data: bytearray, *, leader_epoch: int, now_ms: int | None = None) -> AppendResult:
        """Validate producer batches, assign their offsets, and append them.

        ``data`` is modified in place (base offsets and leader epoch stamped).
        Raises CorruptRecordError or MessageTooLargeError and writes nothing
        when any batch in ``data`` is bad.
        """
        try:
            headers = validate_batches(data, batch_bytes_max=self.config.max_message_bytes, from_producer=True)
        except CorruptRecordError as exc:
            if exc.too_large:
                raise MessageTooLargeError(exc.message) from None
            raise
        # Idempotent producers: a resent batch already here gets its first answer.
        idempotent = any(header.producer_id >= 0 for header in headers)
        if idempotent:
            duplicate_offsets = [self.producers.check(header) for header in headers]
            if any(offset is not None for offset in duplicate_offsets):
                first = duplicate_offsets[0]
                if len(headers) > 1 or first is None:  # one entry, a duplicate: first is its offset
                    raise errors.InvalidRequestError("resend idempotent batches one per partition entry")
                return AppendResult(first, first + headers[0].last_offset_delta, 0, 0, duplicate=True)
        entries = self.epochs.entries
        if entries and leader_epoch < entries[-1][0]:
            raise InvariantError(f"{self.topic}-{self.partition}: a leader in epoch {leader_epoch} appending after "
                                 f"epoch {entries[-1][0]}; epochs only grow")
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        self._maybe_roll(len(data), now_ms)
        active = self.active_segment
        base_offset = next_offset = active.next_offset
        self.epochs.assign(leader_epoch, base_offset)
        stamped: list[BatchHeader] = []
        position = 0
        records = 0
        for header in headers:
            stamp_batch(data, position, next_offset, leader_epoch)
            stamped.append(header.stamped(next_offset, leader_epoch))
            next_offset += header.last_offset_delta + 1
            records += header.record_count
            position += header.size
        active.append(data, stamped)
        self._tail = (base_offset, next_offset, bytes(data)) if len(data) <= TAIL_BYTES_MAX else None
        if idempotent:
            for header in stamped:
                self.producers.update(header)
                if header.attributes & ATTRIBUTE_TRANSACTIONAL:
                    self.transactions.observe(header)
        appended = self.appended
        if appended is not None:
            if len(appended) == appended.maxlen:  # nobody took them: the oldest are read back instead
                self.appended_from = appended[1][0]
            appended.extend([(header.base_offset, header.record_count, header.size) for header in stamped])
        return AppendResult(base_offset, next_offset - 1, records, len(data))

    def count_appends(self, keep_max: int = 100_000) -> None:
        """Note every batch appended as leader from now on (see ``appended``)."""
        if self.appended is None:
            self.appended = deque(maxlen=keep_max)
            self.appended_from = self.log_end_offset

    def stop_counting_appends(self) -> None:
        self.appended = None

    def append_replicated(self, data: bytes) -> AppendResult:
        """Append batches copied from the leader, offsets and epochs as they are.

        Raises CorruptRecordError, writing nothing, unless every batch is
        intact and the first starts exactly at the log end offset.
        """
        self.appended = None  # a follower's appends are not its own
        self._tail = None
        headers = validate_batches(data, batch_bytes_max=len(data), from_producer=False)
        next_offset = self.log_end_offset
        gapless = self.gapless
        markers = []  # each control batch's marker, read before anything changes (a bad one refuses them all)
        position = 0
        for header in headers:
            # Gaps are fine when the leader's log may be compacted; going back never is.
            problem = header_problem(header, next_offset, gapless)
            if problem:
                raise CorruptRecordError(f"replicated batch: {problem} (the log ends at {self.log_end_offset})")
            next_offset = header.next_offset
            markers.append(read_marker(data, position) if header.attributes & ATTRIBUTE_CONTROL else None)
            position += header.size
        self._maybe_roll(len(data), int(time.time() * 1000))
        base_offset = self.log_end_offset
        if base_offset < self.high_watermark:  # committed records are never written over
            raise InvariantError(f"{self.topic}-{self.partition}: copying batches at {base_offset}, below the "
                                 f"high watermark {self.high_watermark}")
        for header, marker in zip(headers, markers, strict=True):
            self.epochs.assign(header.leader_epoch, header.base_offset)
            self.producers.update(header)
            if header.attributes & ATTRIBUTE_TRANSACTIONAL:
                self.transactions.observe(header, marker)
        self.active_segment.append(data, headers)
        return AppendResult(base_offset, next_offset - 1, sum(h.record_count for h in headers), len(data))

    def append_marker(self, producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int,
                      leader_epoch: int, now_ms: int | None = None) -> AppendResult:
        """End ``producer_id``'s transaction in this partition with a commit or abort marker (a control batch)."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        data = bytearray(build_marker(producer_id, producer_epoch, commit=commit, coordinator_epoch=coordinator_epoch,
                                      timestamp_ms=now_ms))
        (header,) = validate_batches(data, batch_bytes_max=len(data), from_producer=False)
        self._maybe_roll(len(data), now_ms)
        base_offset = self.log_end_offset
        self.epochs.assign(leader_epoch, base_offset)
        stamp_batch(data, 0, base_offset, leader_epoch)
        stamped = header.stamped(base_offset, leader_epoch)
        self.active_segment.append(data, [stamped])
        self._tail = None
        self.transactions.observe(stamped, read_marker(data))
        if self.appended is not None:
            self.appended.append((base_offset, 0, len(data)))  # not a message: metered as bytes only
        return AppendResult(base_offset, base_offset, 0, len(data))

    @property
    def last_stable_offset(self) -> int:
        """Where ``read_committed`` readers stop: the oldest open transaction's first offset, or the HW."""
        return self.transactions.last_stable_offset(self.high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTransaction]:
        return self.transactions.aborted_between(start, end)

    def _rebuild_batch_state(self) -> None:
        """Rebuild idempotent-producer state and the transaction index from batch headers (and markers)."""
        self.producers.clear()
        self.transactions.clear()
        for segment in self.segments:
            for position, header in segment.iter_headers():
                self.producers.update(header)
                if header.attributes & ATTRIBUTE_TRANSACTIONAL:
                    control = header.attributes & ATTRIBUTE_CONTROL
                    marker = read_marker(segment.read_batch(position, header.size)) if control else None
                    self.transactions.observe(header, marker)
        self.transactions.forget_below(self.log_start_offset)

    def _last_epoch(self) -> int | None:
        """The leader epoch of the log's last batch (None for an empty log)."""
        for segment in reversed(self.segments):
            header = segment.last_batch_header()
            if header is not None:
                return header.leader_epoch
        return None

    def _rebuild_epochs(self) -> None:
        """Refill the epoch cache from batch headers (its file was lost)."""
        for segment in self.segments:
            for _position, header in segment.iter_headers():
                self.epochs.assign(header.leader_epoch, header.base_offset)

    def _maybe_roll(self, incoming_bytes: int, now_ms: int) -> None:
        active = self.active_segment
        if active.size_bytes == 0:
            return
        too_big = active.size_bytes + incoming_bytes > self.config.segment_bytes
        too_old = now_ms - active.created_ms > self.config.segment_ms
        # Relative offsets in the index are 32-bit.
        too_many = active.next_offset - active.base_offset > 2**31 - 2**20
        if too_big or too_old or too_many:
            self.roll()

    def roll(self) -> None:
        """Close the active segment for writing and start a new one at the LEO."""
        active = self.active_segment
        if active.size_bytes == 0:
            return
        active.write_indexes()
        active.fsync()
        active.seal()
        segment = Segment(self.directory, active.next_offset, self.config.index_interval_bytes, gapless=self.gapless)
        segment.track(self.open_files)
        self.segments.append(segment)
        self._base_offsets.append(segment.base_offset)
        log.debug("rolled %s-%d to a new segment at %d", self.topic, self.partition, segment.base_offset)

    def flush(self) -> int:
        """fsync every segment holding unflushed data; return the durable offset.

        Safe to call from a flusher thread while the loop thread appends: the
        offset published is the LEO seen before the fsyncs started.
        """
        target = self.log_end_offset
        for segment in list(self.segments):
            if segment.next_offset > self.flushed_offset:
                segment.fsync()  # a rolled one whose file the LRU closed is opened for it
        if target > self.flushed_offset:
            self.flushed_offset = target
        self.last_flush_monotonic = time.monotonic()
        return target

    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (replication uses this)."""
        if offset >= self.log_end_offset:
            return
        self.appended = None
        while len(self.segments) > 1 and self.segments[-1].base_offset >= offset:
            self.segments.pop().delete()
            self._base_offsets.pop()
        self.active_segment.unseal()  # a rolled segment becomes the one written to again
        self.active_segment.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self._rebuild_batch_state()
        self.high_watermark = min(self.high_watermark, self.log_end_offset)
        self.flushed_offset = min(self.flushed_offset, self.log_end_offset)
        self._deleted_below = min(self._deleted_below, self.log_end_offset)

    def start_over_at(self, offset: int) -> None:
        """Drop every record and go on from ``offset``, empty (a follower behind its leader's log start)."""
        self.appended = None
        self._tail = None
        for segment in self.segments:
            segment.delete()
        segment = Segment(self.directory, offset, self.config.index_interval_bytes, gapless=self.gapless)
        segment.track(self.open_files)
        self.segments = [segment]
        self.replaced_segments()
        self.epochs.clear()
        self.producers.clear()
        self.transactions.clear()
        self.high_watermark = self.flushed_offset = offset
        self._write_start(offset)

    # -- reading ----------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int | None = None) -> ReadResult:
        """Whole batches from ``offset``, stopping below ``max_offset`` (default: the HW).

        Raises OffsetOutOfRangeError below the log start or past the log end.
        """
        limit = self.high_watermark if max_offset is None else max_offset
        start, end = self.log_start_offset, self.log_end_offset
        if offset < start or offset > end:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside {self.topic}-{self.partition}'s range [{start}, {end}]"
            )
        tail = self._tail
        if tail is not None and tail[0] == offset and tail[1] <= limit and tail[1] == end and len(tail[2]) <= max_bytes:
            return ReadResult(tail[2], self.high_watermark, start, end)
        data = b""
        if offset < limit:
            slot = bisect_right(self._base_offsets, offset) - 1
            # The first segment with a batch ending at or after ``offset``; after
            # compaction some segments hold nothing at all, so look further.
            for segment in self.segments[slot:]:
                if segment.base_offset >= limit:
                    break
                data, expected_base = segment.read(offset, max_bytes, limit)
                if data:
                    data = self._check_served(data, offset, expected_base)
                    break
        return ReadResult(data, self.high_watermark, start, end)

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int]:
        """(offset, timestamp) of the first record at or after ``timestamp_ms``; (-1, -1) if none."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp_ms:
                continue
            for position, header in segment.batch_headers_from_timestamp(timestamp_ms):
                if header.attributes & ATTRIBUTE_CONTROL:
                    continue  # a transaction's marker is no message
                batch = segment.read_batch(position, header.size)
                for record in decode_records(batch):
                    if record.timestamp_ms >= timestamp_ms and record.offset < self.high_watermark:
                        return record.offset, record.timestamp_ms
        return -1, -1

    # -- retention and lifecycle ----------------------------------------------

    def enforce_retention(self, now_ms: int) -> int:
        """Delete whole segments past retention.ms or retention.bytes; return how many."""
        if not self.config.delete:
            return 0  # cleanup.policy=compact: the cleaner keeps the log small instead
        retention_ms = self.config.retention_ms
        retention_bytes = self.config.retention_bytes
        active = self.active_segment
        if (
            retention_ms >= 0
            and active.size_bytes
            and now_ms - active.max_timestamp > retention_ms
            and self.high_watermark == self.log_end_offset
        ):
            # Every record is expired: roll so the whole log can go.
            self.roll()
        deleted = 0
        total_bytes = self.size_bytes
        while len(self.segments) > 1:
            oldest = self.segments[0]
            if oldest.next_offset > self.high_watermark:
                break  # never delete what consumers cannot see yet
            expired = retention_ms >= 0 and now_ms - oldest.max_timestamp > retention_ms
            oversize = retention_bytes >= 0 and total_bytes - oldest.size_bytes >= retention_bytes
            if not (expired or oversize):
                break
            log.info(
                "retention: deleting segment %s of %s-%d (offsets %d..%d, %d bytes, %s)",
                os.path.basename(oldest.log_path),
                self.topic,
                self.partition,
                oldest.base_offset,
                oldest.next_offset - 1,
                oldest.size_bytes,
                "expired" if expired else "over retention.bytes",
            )
            total_bytes -= oldest.size_bytes
            self.segments.pop(0).delete()
            self._base_offsets.pop(0)
            deleted += 1
        if deleted:
            self.transactions.forget_below(self.log_start_offset)
        return deleted

    def delete_records(self, offset: int) -> int:
        """Delete every record below ``offset`` (at most the high watermark); return the new log start.

        The new start is on disk (fsynced) before this returns; whole segments below it are removed
        now, and reads below it are out of range from now on. Asking for less than the start changes nothing.
        """
        if not 0 <= offset <= self.high_watermark:
            raise OffsetOutOfRangeError(
                f"records of {self.topic}-{self.partition} can be deleted up to its high watermark "
                f"{self.high_watermark}, not {offset}")
        if offset <= self.log_start_offset:
            return self.log_start_offset
        self._write_start(offset)
        self._deleted_below = offset
        active = self.active_segment
        if offset == self.log_end_offset and active.size_bytes:
            self.roll()  # everything goes: the active segment too
        self._delete_segments_below(offset)
        log.info("%s-%d: records below %d deleted", self.topic, self.partition, offset)
        return offset

    def follow_start(self, leader_start: int) -> None:
        """A follower: the leader deleted records below ``leader_start``; so does this replica (what it holds)."""
        offset = min(leader_start, self.log_end_offset)
        if offset > self.log_start_offset:
            self._write_start(offset)
            self._deleted_below = offset
            self._delete_segments_below(offset)

    def _delete_segments_below(self, offset: int) -> None:
        """Remove the segments whose records are all below ``offset`` (never the active one)."""
        self.transactions.forget_below(offset)
        removed = False
        while len(self.segments) > 1 and self.segments[0].next_offset <= offset:
            self.segments.pop(0).delete()
            self._base_offsets.pop(0)
            removed = True
        if removed:
            self.write_verified()

    def _read_start(self) -> int:
        try:
            with open(os.path.join(self.directory, _START_FILE)) as f:
                return int(f.read().strip() or 0)
        except (OSError, ValueError):
            return 0

    def _write_start(self, offset: int) -> None:
        write_atomically(os.path.join(self.directory, _START_FILE), f"{offset}\n".encode())

    def close(self) -> None:
        self.epochs.sync()
        self.producers.write_snapshot(self.log_end_offset)
        self.transactions.write_snapshot(self.log_end_offset)
        for segment in self.segments:
            segment.close()
        self.write_verified()

    def delete(self) -> None:
        self.epochs.dropped = True
        for segment in self.segments:
            segment.delete()
        shutil.rmtree(self.directory, ignore_errors=True)
