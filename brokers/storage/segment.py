"""One segment of a partition log and its two sparse indexes.

Files, for a segment whose first offset is 1234::

    00000000000000001234.log        RecordBatches, back to back
    00000000000000001234.index      (relative offset u32, position u32) big-endian
    00000000000000001234.timeindex  (timestamp i64, relative offset u32) big-endian

An index entry is added every ``index_interval_bytes`` of log. The offset index
says "the batch starting at this relative offset is at this byte position";
the time index entry written with it holds the largest timestamp of every
record *before* that batch, so a search for "first record at or after T" may
start at the last entry whose timestamp is below T.

The indexes live in memory (arrays) and are written out whole when the
segment rolls, flushes or closes; a missing or inconsistent index file is
rebuilt from the log by walking batch headers, which is cheap.

Its file may be closed by the broker's LRU of open files (``open_files.py``)
while it is not used, and is opened again by the next read, write or fsync;
once the segment rolls it is *sealed* (never written again) and opened again
read-only.

Ownership: a segment is used by the event-loop thread only, except ``fsync``,
which a flusher thread may call, and reads by a compaction thread; both only
touch the file descriptor, under ``_fd_lock`` when the LRU may close it. Both
take a descriptor of their own under the lock and wait for the disk outside it
(``own_descriptor``): the event loop never waits for another thread's I/O.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from array import array
from bisect import bisect_right
from typing import TYPE_CHECKING

from crc32c import crc32c
from tideway_server.brokers.storage.files import write_atomically

from tideway.record.batch import (
    BATCH_HEADER_BYTES,
    BATCH_LENGTH_MIN,
    CRC_START,
    LOG_OVERHEAD_BYTES,
    MAGIC,
    BatchHeader,
    iter_batches,
    offsets_problem,
    read_header,
)

_LAST_OFFSET_DELTA = struct.Struct(">i")  # at byte 23 of a batch
if TYPE_CHECKING:
    from tideway_server.brokers.storage.open_files import OpenFiles

__all__ = ["Segment", "segment_file_name"]

log = logging.getLogger(__name__)

_INDEX_ENTRY = struct.Struct(">II")
_TIME_ENTRY = struct.Struct(">qI")
# Read this much at a time while scanning a log during recovery.
_RECOVERY_CHUNK_BYTES = 8 << 20
_READ_HINTS_MAX = 16  # where recent reads ended and recent appends began (see Segment._read_hints)


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    """A ``.log`` file of whole batches with its offset and time indexes."""

    def __init__(self, directory: str, base_offset: int, index_interval_bytes: int, *, gapless: bool = False) -> None:
        self.directory = directory
        self.base_offset = base_offset
        # True when every batch must start exactly where the one before ended (a log never compacted, so
        # without gaps): then a base offset, outside the CRC, is checked exactly (see _check_batch).
        self.gapless = gapless
        self.index_interval_bytes = index_interval_bytes
        self.log_path = os.path.join(directory, segment_file_name(base_offset, ".log"))
        self.index_path = os.path.join(directory, segment_file_name(base_offset, ".index"))
        self.time_index_path = os.path.join(directory, segment_file_name(base_offset, ".timeindex"))
        self.fd = os.open(self.log_path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        self.size_bytes = os.fstat(self.fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        # When this segment started, on the broker's clock: segment.ms rolls by
        # this, not by producer timestamps, which may be anything.
        self.created_ms = int(time.time() * 1000)
        self.index_offsets = array("q")  # relative offsets
        self.index_positions = array("q")
        self.index_timestamps = array("q")  # max timestamp of records before the entry
        self._bytes_since_index = 0
        self._indexes_dirty = False
        # offset -> byte position of the batch starting there, for the last few reads' ends and
        # appends: readers at the log end (followers, consumers, a queue's coordinator) each
        # start where they stopped or where the newest batch begins, instead of walking batch
        # headers from an index entry; one hint for all of them missed for all but one.
        self._read_hints: dict[int, int] = {}
        # The broker's LRU of open files, which may close this one's file while it is not used (see
        # open_files.py; None: it stays open). The lock keeps a close from landing between a
        # thread's check of ``fd`` and its use. Sealed: rolled, never written again.
        self._files: OpenFiles | None = None
        self._fd_lock = threading.Lock()
        self.sealed = False

    # -- loading -------------------------------------------------------------

    def load(self, *, recover: bool) -> int:
        """Read the segment's state from disk; return the bytes truncated.

        With ``recover`` every batch is CRC-checked and the file is cut at the
        first torn or corrupt batch. Otherwise batch headers are trusted and
        the indexes are loaded from their files when those are consistent.
        """
        if recover:
            return self._recover()
        if not self._load_index_files():
            self._rebuild_from_headers()
        return 0

    def _load_index_files(self) -> bool:
        try:
            with open(self.index_path, "rb") as f:
                index_bytes = f.read()
            with open(self.time_index_path, "rb") as f:
                time_bytes = f.read()
        except FileNotFoundError:
            return False
        if len(index_bytes) % 8 or len(time_bytes) % 12 or len(index_bytes) // 8 != len(time_bytes) // 12:
            return False
        offsets, positions, timestamps = array("q"), array("q"), array("q")
        for (relative, position), (timestamp, relative_again) in zip(
            _INDEX_ENTRY.iter_unpack(index_bytes), _TIME_ENTRY.iter_unpack(time_bytes), strict=True
        ):
            if relative != relative_again or position >= self.size_bytes:
                return False
            offsets.append(relative)
            positions.append(position)
            timestamps.append(timestamp)
        # The tail after the last entry tells next offset and max timestamp.
        start = positions[-1] if positions else 0
        tail = self._pread(self.size_bytes - start, start)
        last_end = 0
        max_timestamp = timestamps[-1] if timestamps else -1
        next_offset = self.base_offset + offsets[-1] if offsets else self.base_offset
        for position, _base, size in iter_batches(tail):
            header = read_header(tail, position)
            next_offset = header.next_offset
            max_timestamp = max(max_timestamp, header.max_timestamp)
            last_end = position + size
        if start + last_end != self.size_bytes:
            return False
        self.index_offsets, self.index_positions, self.index_timestamps = offsets, positions, timestamps
        self.next_offset = next_offset
        self.max_timestamp = max_timestamp
        self._bytes_since_index = self.size_bytes - start
        return True

    def _rebuild_from_headers(self) -> None:
        self._reset_state()
        position = 0
        for batch_position, header in self.iter_headers():
            self._track(header, batch_position)
            position = batch_position + header.size
        if position != self.size_bytes:
            # Headers do not add up: only recovery may cut a file, so check properly.
            self._recover()
        self._indexes_dirty = True

    def _recover(self) -> int:
        self._reset_state()
        position, _next_offset, reason = self.scan(0, self.base_offset, self.size_bytes, track=self._track)
        truncated = self.size_bytes - position
        if truncated:
            log.warning(
                "corrupt or torn data in %s at byte %d (%s): truncating %d bytes; "
                "the log keeps offsets below %d",
                self.log_path,
                position,
                reason or "incomplete batch",
                truncated,
                self.next_offset,
            )
            os.ftruncate(self.fd, position)
            os.fsync(self.fd)
            self.size_bytes = position
        self._indexes_dirty = True
        return truncated

    def scan(self, position: int, expected_offset: int, max_bytes: int, *, track=None,
             deadline: float | None = None) -> tuple[int, int, str]:
        """CRC-check the whole batches from byte ``position``, about ``max_bytes`` of them.

        Returns (the position after the last good batch, the offset after it,
        the problem found there or ""). A position equal to ``size_bytes`` with
        no problem means the file is intact to its end. Only ``pread``: loads,
        recoveries and the scrubber use it alike. ``track(header, position)``
        is called for each good batch. With a ``deadline`` (``time.perf_counter``),
        the scan also stops at the first batch boundary past it (the scrubber's
        bound on how long it holds the event loop).
        """
        stop = min(self.size_bytes, position + max_bytes)
        while position < stop:
            chunk = self._pread(min(_RECOVERY_CHUNK_BYTES, stop - position), position)
            consumed = 0
            while True:
                reason, size, header = _check_batch(chunk, consumed, position + consumed, expected_offset, self.gapless)
                if reason:
                    return position + consumed, expected_offset, reason
                if header is None:
                    break
                if track is not None:
                    track(header, position + consumed)
                expected_offset = header.next_offset
                consumed += size
                if deadline is not None and time.perf_counter() >= deadline:
                    return position + consumed, expected_offset, ""
            if consumed == 0:
                # One batch larger than the chunk (or than what is left of max_bytes): read it whole.
                raw_header = self._pread(BATCH_HEADER_BYTES, position)
                if len(raw_header) < BATCH_HEADER_BYTES:
                    return position, expected_offset, "file ends inside a batch header (torn write)"
                size = read_header(raw_header).size
                if position + size > self.size_bytes:
                    return position, expected_offset, f"file ends inside the batch at byte {position} (torn write)"
                reason, size, header = _check_batch(self._pread(size, position), 0, position, expected_offset,
                                                    self.gapless)
                if reason or header is None:
                    return position, expected_offset, reason or f"unreadable batch at byte {position}"
                if track is not None:
                    track(header, position)
                expected_offset = header.next_offset
                consumed = size
            position += consumed
        return position, expected_offset, ""

    def modification_stamp(self) -> tuple[int, int]:
        """(size, mtime in ns) of the file: any write since a check changes it."""
        stat = os.fstat(self.fd) if self.fd >= 0 and self._files is None else os.stat(self.log_path)
        return stat.st_size, stat.st_mtime_ns

    def _reset_state(self) -> None:
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self.index_offsets = array("q")
        self.index_positions = array("q")
        self.index_timestamps = array("q")
        self._bytes_since_index = 0
        self._read_hints = {}

    # -- writing -------------------------------------------------------------

    def append(self, data: bytes | bytearray, headers: list[BatchHeader]) -> None:
        """Append whole, already validated and stamped batches."""
        position = self.size_bytes
        files = self._files
        if files is None:
            _write_all(self.fd, data)
        else:
            with self._fd_lock:
                _write_all(self._open_fd(), data)
            files.used(self)
        for header in headers:
            self._track(header, position)
            self._hint(header.base_offset, position)
            position += header.size
        self.size_bytes = position

    def _track(self, header: BatchHeader, position: int) -> None:
        if self._bytes_since_index >= self.index_interval_bytes:
            self.index_offsets.append(header.base_offset - self.base_offset)
            self.index_positions.append(position)
            self.index_timestamps.append(self.max_timestamp)
            self._bytes_since_index = 0
            self._indexes_dirty = True
        self._bytes_since_index += header.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
        self.next_offset = header.next_offset

    def fsync(self) -> None:
        files = self._files  # (read once: a flusher thread calls this while the loop may delete the segment)
        if files is None:
            if self.fd >= 0:  # (closed: the segment was deleted meanwhile, nothing to keep)
                os.fsync(self.fd)
            return
        try:
            fd = self._own_descriptor(files)
        except FileNotFoundError:
            return  # deleted meanwhile (retention, compaction)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def own_descriptor(self) -> int:
        """A descriptor of the segment's file for another thread's long read (the cleaner); the caller closes it."""
        files = self._files
        return os.dup(self.fd) if files is None else self._own_descriptor(files)

    def _own_descriptor(self, files: OpenFiles) -> int:
        # Taken under the lock (the LRU may close the segment's descriptor; a closed file is opened
        # again, the same inode), used outside it. An fsync or a cleaner's read that held the lock
        # stopped the event loop's appends and reads of the segment until the disk was done (flush:
        # always, 1 KiB records: 3.6% fewer a second).
        with self._fd_lock:
            fd = os.dup(self._open_fd())
        files.used(self)  # (a file opened for it counts, and may be closed again)
        return fd

    def write_indexes(self) -> None:
        """Write both index files whole (atomically, by rename)."""
        if not self._indexes_dirty:
            return
        index = b"".join(
            _INDEX_ENTRY.pack(relative, position)
            for relative, position in zip(self.index_offsets, self.index_positions, strict=True)
        )
        times = b"".join(
            _TIME_ENTRY.pack(timestamp, relative)
            for timestamp, relative in zip(self.index_timestamps, self.index_offsets, strict=True)
        )
        # A lost index rename is harmless (the index is rebuilt), so the
        # directory is not fsynced here.
        write_atomically(self.index_path, index, sync_directory=False)
        write_atomically(self.time_index_path, times, sync_directory=False)
        self._indexes_dirty = False

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose base offset is at or after ``offset``."""
        position = self._position_of(offset) if offset < self.next_offset else self.size_bytes
        if position is None or position >= self.size_bytes:
            return
        files = self._files
        with self._fd_lock:
            os.ftruncate(self._open_fd(), position)
        if files is not None:
            files.used(self)
        self.size_bytes = position
        self._rebuild_from_headers()

    # -- reading -------------------------------------------------------------

    def read(self, offset: int, max_bytes: int, max_offset: int) -> tuple[bytes, int]:
        """Whole batches from the one holding ``offset``, below ``max_offset``, and the base offset the first of
        them should have (exactly in a gapless segment, at least otherwise: see ``_locate``).

        At most ``max_bytes`` unless the first batch alone is larger: then that
        batch, so a consumer always makes progress.
        """
        located = self._locate(offset)
        if located is None:
            return b"", offset
        position, expected = located
        raw = self._pread(min(max_bytes, self.size_bytes - position), position)
        end = 0
        chain = expected
        for batch_position, base_offset, size in iter_batches(raw):
            if self._out_of_sequence(base_offset, chain):
                # Damage outside the CRC (a flipped base offset): handed on, so the log's check refuses it,
                # rather than taken for a batch past max_offset and silently not served (issue 40).
                end = batch_position + size
                break
            if base_offset >= max_offset:
                break
            end = batch_position + size
            chain = base_offset + _LAST_OFFSET_DELTA.unpack_from(raw, batch_position + 23)[0] + 1
        if end == 0:
            # The first batch is larger than max_bytes (or over max_offset).
            first = self._pread(BATCH_HEADER_BYTES, position)
            if len(first) < BATCH_HEADER_BYTES:
                return b"", expected
            header = read_header(first)
            if header.base_offset >= max_offset and not self._out_of_sequence(header.base_offset, expected):
                return b"", expected
            raw = self._pread(header.size, position)
            end = len(raw)
        # Remember where the next sequential read will start.
        last_header = read_header(raw, _last_batch_position(raw, end))
        self._hint(last_header.next_offset, position + end)
        return (raw[:end] if end < len(raw) else raw), expected

    def _out_of_sequence(self, base_offset: int, expected: int) -> bool:
        """True when a batch expected to start at ``expected`` cannot start at ``base_offset`` in this segment."""
        return (base_offset < expected or base_offset >= self.next_offset
                or (self.gapless and base_offset != expected))

    def _hint(self, offset: int, position: int) -> None:
        hints = self._read_hints
        hints[offset] = position
        if len(hints) > _READ_HINTS_MAX:
            del hints[next(iter(hints))]

    def _position_of(self, offset: int) -> int | None:
        """Byte position of the batch holding ``offset``; None if past the end."""
        located = self._locate(offset)
        return None if located is None else located[0]

    def _locate(self, offset: int) -> tuple[int, int] | None:
        """(byte position of the batch holding ``offset``, the base offset that batch should have); None if past
        the end. The base is known apart from the batch's own header, which the CRC does not cover: a read hint
        is keyed by it (the offset after the batch before), and a walk from an index entry counts it (the index
        entry's offset, then each batch's end). In a segment with gaps it is a lower bound."""
        if offset >= self.next_offset:
            return None
        hinted = self._read_hints.get(offset)
        if hinted is not None and hinted < self.size_bytes:
            return hinted, offset
        slot = bisect_right(self.index_offsets, offset - self.base_offset) - 1
        position = self.index_positions[slot] if slot >= 0 else 0
        expected = self.base_offset + (self.index_offsets[slot] if slot >= 0 else 0)
        while position < self.size_bytes:
            raw = self._pread(BATCH_HEADER_BYTES, position)
            header = read_header(raw)
            # A batch out of sequence is damage (a flipped base offset): stop at it, so a truncation removes it
            # and a read's checks see it, instead of stepping over it.
            if header.last_offset >= offset or header_problem(header, expected, self.gapless):
                return position, expected
            expected = header.next_offset
            position += header.size
        return None

    def last_batch_header(self) -> BatchHeader | None:
        """The header of the segment's last batch (None when it is empty)."""
        position = self._position_of(self.next_offset - 1) if self.next_offset > self.base_offset else None
        return None if position is None else read_header(self._pread(BATCH_HEADER_BYTES, position))

    def batch_headers_from_timestamp(self, timestamp_ms: int) -> list[tuple[int, BatchHeader]]:
        """(position, header) of batches that may hold the first record >= timestamp."""
        slot = bisect_right(self.index_timestamps, timestamp_ms - 1) - 1
        # index_timestamps is non-decreasing; the entry at ``slot`` has every
        # earlier record below the timestamp.
        position = self.index_positions[slot] if slot >= 0 else 0
        out = []
        while position < self.size_bytes:
            header = read_header(self._pread(BATCH_HEADER_BYTES, position))
            if header.max_timestamp >= timestamp_ms:
                out.append((position, header))
                break
            position += header.size
        return out

    def iter_headers(self):
        """Yield (position, header) of every whole batch from the start of the file.

        Trusts the headers (no CRC check); stops at one that does not add up.
        """
        position = 0
        while position < self.size_bytes:
            raw = self._pread(BATCH_HEADER_BYTES, position)
            if len(raw) < BATCH_HEADER_BYTES:
                return
            header = read_header(raw)
            if header.batch_length < BATCH_LENGTH_MIN or position + header.size > self.size_bytes:
                return
            yield position, header
            position += header.size

    def read_batch(self, position: int, size: int) -> bytes:
        return self._pread(size, position)

    def _pread(self, size: int, position: int) -> bytes:
        files = self._files
        if files is None:
            return os.pread(self.fd, size, position)
        with self._fd_lock:
            data = os.pread(self._open_fd(), size, position)
        files.used(self)
        return data

    def _open_fd(self) -> int:
        """The file descriptor, opened again if the LRU closed it (the caller holds ``_fd_lock``)."""
        if self.fd < 0:
            self.fd = os.open(self.log_path, os.O_RDONLY if self.sealed else os.O_RDWR | os.O_APPEND)
        return self.fd

    # -- lifecycle -----------------------------------------------------------

    def track(self, files: OpenFiles | None) -> None:
        """Put the file under the broker's LRU of open files (None: it stays open)."""
        if files is None or self._files is not None:
            return
        self._files = files
        if self.fd >= 0:
            files.used(self)

    def seal(self) -> None:
        """Rolled (fsynced, never written again): opened again read-only."""
        self.sealed = True

    def unseal(self) -> None:
        """Written again (a follower truncated back into it): opened again for writing."""
        if not self.sealed:
            return
        with self._fd_lock:
            self.sealed = False
            if self.fd >= 0 and self._files is not None:  # perhaps opened read-only: the next use opens it for writing
                os.close(self.fd)
                self.fd = -1

    def close_idle(self) -> None:
        """Close the file until it is used again (OpenFiles evicting it)."""
        with self._fd_lock:
            if self.fd >= 0 and self._files is not None:
                os.close(self.fd)
                self.fd = -1

    def _close_file(self) -> None:
        files, self._files = self._files, None
        if files is not None:
            files.forget(self)
        with self._fd_lock:
            if self.fd >= 0:
                os.close(self.fd)
                self.fd = -1

    def close(self) -> None:
        self.write_indexes()
        self._close_file()

    def delete_indexes(self) -> None:
        for path in (self.index_path, self.time_index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    def close_without_indexes(self) -> None:
        """Close the file only (its index files now belong to a replacement)."""
        self._close_file()

    def delete(self) -> None:
        self._close_file()
        for path in (self.log_path, self.index_path, self.time_index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def _write_all(fd: int, data: bytes | bytearray) -> None:
    written = os.write(fd, data)  # all of it, nearly always: a view only for the rest
    if written < len(data):
        view = memoryview(data)
        while written < len(view):
            written += os.write(fd, view[written:])


def _last_batch_position(raw: bytes, end: int) -> int:
    last = 0
    for position, _base, _size in iter_batches(memoryview(raw)[:end]):
        last = position
    return last


def header_problem(header: BatchHeader, expected_offset: int, gapless: bool) -> str:
    """What is wrong with the offsets of a batch expected at ``expected_offset``, or "" (``offsets_problem``)."""
    return offsets_problem(header.base_offset, header.last_offset_delta, header.record_count, expected_offset, gapless)


def _check_batch(
    chunk: bytes, start: int, file_position: int, expected_offset: int, gapless: bool = False
) -> tuple[str, int, BatchHeader | None]:
    """Check the batch at ``start`` of ``chunk``: (problem or "", size, header).

    Beyond the CRC (which does not cover the base offset, length, leader epoch and magic): the base offset
    must follow the previous batch (exactly in a ``gapless`` log, at or after its end otherwise) and the record
    count must fit the last offset delta (exactly in a gapless log). An empty problem with header None means the
    batch runs past the chunk.
    """
    if len(chunk) - start < BATCH_HEADER_BYTES:
        return "", 0, None
    header = read_header(chunk, start)
    size = header.batch_length + LOG_OVERHEAD_BYTES
    if header.batch_length < BATCH_LENGTH_MIN:
        return f"batch length {header.batch_length} at byte {file_position}", 0, None
    if start + size > len(chunk):
        return "", 0, None
    if header.magic != MAGIC:
        return f"magic byte {header.magic} at byte {file_position}", 0, None
    if crc32c(memoryview(chunk)[start + CRC_START : start + size]) != header.crc:
        return f"CRC mismatch in the batch at byte {file_position}", 0, None
    problem = header_problem(header, expected_offset, gapless)
    if problem:
        return f"{problem} at byte {file_position}", 0, None
    return "", size, header
