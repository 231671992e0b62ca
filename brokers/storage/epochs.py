"""The leader epoch cache of a partition replica: where each leader epoch began.

Entries are (epoch, start offset), both strictly increasing. Every batch
carries the epoch of the leader that wrote it, so the cache can always be
rebuilt from the log; it is kept in the partition directory
(``leader-epoch-checkpoint``) so start-up does not have to.

A new epoch's entry is not written at once: the broker's periodic checkpoint
writes the caches that changed, in its worker thread (``pending`` and
``write_pending``). The first append of every partition after a leader
change wrote and fsynced the file on the event loop (a thousand new
partitions, or a failover moving a thousand leaders: 0.3 s of a broker's
event loop). A crash cannot lose it: a clean shutdown writes the file
(``sync``), and after an unclean one the log checks the cache against its
last batch's epoch and rebuilds it from batch headers if they differ
(``Log._load``); a file left behind holds an earlier list of the epochs
(each write replaces it whole), which that check and the cut at the log end
put right.
"""

from __future__ import annotations

import os
from bisect import bisect_right

from tideway_server.brokers.storage.files import write_atomically

__all__ = ["LeaderEpochCache"]

FILE_NAME = "leader-epoch-checkpoint"


class LeaderEpochCache:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries: list[tuple[int, int]] = []
        self.version = 0  # bumped by every change; the file holds version ``written``
        self.written = 0
        self.dropped = False  # the log was deleted: a checkpoint's write must not recreate the file
        try:
            with open(self.path) as f:
                for line in f:
                    epoch, start = line.split()
                    self.entries.append((int(epoch), int(start)))
        except FileNotFoundError:
            pass
        except ValueError:
            self.entries = []  # unreadable: the log's batch headers will refill it

    @property
    def latest_epoch(self) -> int:
        return self.entries[-1][0] if self.entries else -1

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that ``epoch`` begins at ``start_offset`` (no-op if known)."""
        if epoch < 0 or (self.entries and epoch <= self.entries[-1][0]):
            return
        # A later epoch starting at or before an earlier one's start replaces it.
        while self.entries and self.entries[-1][1] >= start_offset:
            self.entries.pop()
        self.entries.append((epoch, start_offset))
        self.version += 1  # written by the next checkpoint (see the module's docstring)

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(largest known epoch <= ``epoch``, offset where it ends).

        The end of the latest epoch is the log end offset. (-1, -1) when every
        known epoch is above ``epoch``.
        """
        epochs = [e for e, _ in self.entries]
        slot = bisect_right(epochs, epoch) - 1
        if slot < 0:
            return -1, -1
        found_epoch = self.entries[slot][0]
        if slot + 1 < len(self.entries):
            return found_epoch, self.entries[slot + 1][1]
        return found_epoch, log_end_offset

    def truncate_from_end(self, end_offset: int) -> None:
        """Forget epochs that start at or after ``end_offset`` (the log was cut there)."""
        before = len(self.entries)
        while self.entries and self.entries[-1][1] >= end_offset:
            self.entries.pop()
        if len(self.entries) != before:
            self._write()

    def clear(self) -> None:
        self.entries = []
        self._write()

    def sync(self) -> None:
        """Write the file now, durably: a clean shutdown's next start trusts it as it is.

        Always, not only when changed since the last write: a checkpoint's write of an
        older list may have landed after this thread's last one.
        """
        self._write()

    def pending(self) -> tuple[int, bytes] | None:
        """(version, contents) to write if the file is behind (the owner's thread takes it)."""
        return (self.version, self._contents()) if self.version != self.written else None

    def write_pending(self, version: int, contents: bytes) -> None:
        """Write what ``pending`` gave (safe in a worker thread: a temporary file of its own)."""
        if self.dropped:
            return
        write_atomically(self.path, contents, sync_directory=False, temporary=self.path + ".checkpoint.tmp")
        self.written = max(self.written, version)

    def _contents(self) -> bytes:
        return "".join(f"{e} {s}\n" for e, s in self.entries).encode()

    def _write(self) -> None:
        self.version += 1
        write_atomically(self.path, self._contents(), sync_directory=False)
        self.written = self.version
