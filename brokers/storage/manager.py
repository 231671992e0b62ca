"""All partition logs of one broker's data directory.

Files in the data directory::

    .lock                         flock'd while a broker uses the directory
    topics.json                   topic name -> TopicConfig (atomic rewrite, now and then)
    topics.journal                changes since: one JSON line each, [name, config or null]
    recovery-point-checkpoint     "topic partition offset" lines: fsynced offsets
    high-watermark-checkpoint     "topic partition offset" lines: last known high watermarks
    .clean-shutdown               present only after a clean shutdown
    <topic>-<partition>/          one Log per partition replica

On start without ``.clean-shutdown`` every log is recovered from its recovery
point: that is how a SIGKILL or a power cut is survived.
"""

from __future__ import annotations

import fcntl
import logging
import os
import shutil
import time

import msgspec
from tideway_server.brokers.storage.config import TopicConfig, validate_topic_name
from tideway_server.brokers.storage.files import fsync_directory, write_atomically
from tideway_server.brokers.storage.log import Log
from tideway_server.brokers.storage.open_files import OPEN_SEGMENTS_MAX, OpenFiles

from tideway.protocol.errors import (
    StorageError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)

__all__ = ["LogManager", "read_topics"]

log = logging.getLogger(__name__)

_TOPICS_FILE = "topics.json"
# A topic's change is a line appended here (one small fsynced write), not a rewrite of every
# topic's settings: creating topic N+1 must not cost more than creating topic 1. The journal is
# folded into topics.json once it holds as many lines as there are topics (or _JOURNAL_MIN).
_TOPICS_JOURNAL = "topics.journal"
_JOURNAL_MIN = 256
_JOURNAL_LINE = msgspec.json.Decoder(tuple[str, TopicConfig | None])
_CHECKPOINT_FILE = "recovery-point-checkpoint"
_HIGH_WATERMARK_FILE = "high-watermark-checkpoint"
_CLEAN_SHUTDOWN_FILE = ".clean-shutdown"


class LogManager:
    """Owns every Log in ``data_dir`` (event-loop thread)."""

    def __init__(self, data_dir: str, *, open_segments_max: int = OPEN_SEGMENTS_MAX) -> None:
        self.data_dir = os.path.abspath(data_dir)
        self.open_files = OpenFiles(open_segments_max)  # rolled segments' files kept open, least recently read closed
        self.topics: dict[str, TopicConfig] = {}
        self.logs: dict[tuple[str, int], Log] = {}
        self._lock_fd = -1
        self._journal_fd = -1
        self._journal_lines = 0
        self.on_corruption = None  # given to every log opened (Log.on_corruption); None keeps the log's default

    def open(self) -> None:
        """Lock the directory, load topics and recover logs after a crash."""
        os.makedirs(self.data_dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(self.data_dir, ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StorageError(f"data directory {self.data_dir} is in use by another broker") from None
        self.topics = read_topics(self.data_dir)
        self._fold_journal()
        clean_marker = os.path.join(self.data_dir, _CLEAN_SHUTDOWN_FILE)
        clean = os.path.exists(clean_marker)
        checkpoint = {} if clean else self._read_offsets(_CHECKPOINT_FILE)
        high_watermarks = self._read_offsets(_HIGH_WATERMARK_FILE)
        started = time.monotonic()
        for name, config in self.topics.items():
            for partition in range(config.partitions):
                if not os.path.isdir(self._log_dir(name, partition)):
                    continue  # a replica this broker does not hold
                recovery_point = None if clean else checkpoint.get((name, partition), 0)
                log_ = self._adopt(Log.open(
                    self._log_dir(name, partition), name, partition, config, recovery_point=recovery_point,
                    open_files=self.open_files,
                ))
                # A replicated partition must not show records that were never
                # committed: start from the last high watermark known, or from the
                # log's start when none was checkpointed (killed before the first
                # checkpoint), as Kafka does. The replica layer moves it on: a
                # leader from its ISR, a follower from its leader. A lone replica
                # commits at once.
                if config.replication_factor > 1:
                    known = high_watermarks.get((name, partition), log_.log_start_offset)
                    log_.high_watermark = max(log_.log_start_offset, min(known, log_.log_end_offset))
                self.logs[(name, partition)] = log_
        if clean:
            os.unlink(clean_marker)
            fsync_directory(self.data_dir)
        if clean:
            how = "clean shutdown"
        elif self.topics:
            how = "recovered after an unclean shutdown"
        else:
            how = "new data directory"
        log.info(
            "loaded %d topics, %d partitions from %s in %.2fs (%s)",
            len(self.topics),
            len(self.logs),
            self.data_dir,
            time.monotonic() - started,
            how,
        )

    def _log_dir(self, topic: str, partition: int) -> str:
        return os.path.join(self.data_dir, f"{topic}-{partition}")

    # -- topics -----------------------------------------------------------------

    def create_topic(self, name: str, config: TopicConfig, *, local_partitions: list[int] | None = None) -> None:
        """Create a topic with logs for ``local_partitions`` (default: all of them)."""
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        config.check()
        self.topics[name] = config
        self._write_topics(name)
        for partition in range(config.partitions) if local_partitions is None else local_partitions:
            self.add_replica(name, partition)
        log.info("created topic %s: %d partitions, flush %s", name, config.partitions, config.flush_policy)

    def set_partition_count(self, name: str, count: int) -> None:
        """Record that topic ``name`` now has ``count`` partitions (it only grows)."""
        config = self.topics[name]
        if count > config.partitions:
            self.topics[name] = msgspec.structs.replace(config, partitions=count)
            self._write_topics(name)

    def set_config(self, name: str, config: TopicConfig) -> None:
        """Replace topic ``name``'s settings; its open logs use them from now on."""
        current = self.topics[name]
        if config.partitions < current.partitions:  # partitions never shrink: an older view of the topic
            config = msgspec.structs.replace(config, partitions=current.partitions)
        config.check()
        if config == current:
            return
        self.topics[name] = config
        self._write_topics(name)
        for (topic, _), log_ in self.logs.items():
            if topic == name:
                log_.set_config(config)
        log.info("topic %s settings changed", name)

    def add_replica(self, name: str, partition: int) -> Log:
        """Open (creating if needed) this broker's log of ``name``-``partition``."""
        log_ = self.logs.get((name, partition))
        if log_ is None:
            config = self.topics[name]
            if partition >= config.partitions:
                raise UnknownTopicOrPartitionError(f"topic {name!r} has no partition {partition}")
            log_ = self._adopt(Log.open(self._log_dir(name, partition), name, partition, config, recovery_point=None,
                                        open_files=self.open_files))
            self.logs[(name, partition)] = log_
        return log_

    def _adopt(self, log_: Log) -> Log:
        if self.on_corruption is not None:
            log_.on_corruption = self.on_corruption
        return log_

    def delete_topic(self, name: str) -> None:
        config = self.topics.pop(name, None)
        if config is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        self._write_topics(name)
        for partition in range(config.partitions):
            log_ = self.logs.pop((name, partition), None)
            if log_ is not None:
                log_.delete()
            else:
                shutil.rmtree(self._log_dir(name, partition), ignore_errors=True)
        log.info("deleted topic %s", name)

    def get_log(self, topic: str, partition: int) -> Log:
        try:
            return self.logs[(topic, partition)]
        except KeyError:
            if topic in self.topics:
                raise UnknownTopicOrPartitionError(
                    f"topic {topic!r} has no partition {partition} (it has {self.topics[topic].partitions})"
                ) from None
            raise UnknownTopicOrPartitionError(f"topic {topic!r} does not exist") from None

    # -- durability ---------------------------------------------------------------

    def checkpoint(self) -> None:
        """Write every log's durable offset to the recovery-point file (and the high watermarks)."""
        self.write_checkpoint(self.checkpoint_contents())

    def checkpoint_contents(self) -> tuple[bytes, bytes, list]:
        """What ``write_checkpoint`` writes, as of now (cheap: the owner's thread takes it)."""
        items = list(self.logs.items())
        recovery_points = "".join(f"{topic} {partition} {log_.flushed_offset}\n" for (topic, partition), log_ in items)
        high_watermarks = "".join(f"{topic} {partition} {log_.high_watermark}\n" for (topic, partition), log_ in items)
        epochs = [(log_.epochs, pending) for _key, log_ in items if (pending := log_.epochs.pending()) is not None]
        return recovery_points.encode(), high_watermarks.encode(), epochs

    def write_checkpoint(self, contents: tuple[bytes, bytes, list]) -> None:
        """Write the files; safe in a worker thread (it only touches these files, and epoch caches' own temporaries)."""
        recovery_points, high_watermarks, epochs = contents
        for cache, (version, data) in epochs:  # new leader epochs (brokers/storage/epochs.py)
            try:
                cache.write_pending(version, data)
            except FileNotFoundError:
                pass  # its partition was deleted meanwhile
        write_atomically(os.path.join(self.data_dir, _CHECKPOINT_FILE), recovery_points)
        write_atomically(os.path.join(self.data_dir, _HIGH_WATERMARK_FILE), high_watermarks)

    def enforce_retention(self, now_ms: int | None = None) -> int:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        return sum(log_.enforce_retention(now_ms) for log_ in self.logs.values())

    def close(self) -> None:
        """Flush everything, write indexes and checkpoints, mark a clean shutdown."""
        for log_ in self.logs.values():
            log_.flush()
            log_.close()
        self.checkpoint()
        write_atomically(os.path.join(self.data_dir, _CLEAN_SHUTDOWN_FILE), b"")
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
            self._journal_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # -- files ------------------------------------------------------------------------

    def _fold_journal(self) -> None:
        """Write every topic to topics.json and start the journal afresh."""
        write_atomically(os.path.join(self.data_dir, _TOPICS_FILE), msgspec.json.encode(self.topics))
        if self._journal_fd >= 0:
            os.close(self._journal_fd)
        path = os.path.join(self.data_dir, _TOPICS_JOURNAL)
        self._journal_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        os.fsync(self._journal_fd)
        fsync_directory(self.data_dir)
        self._journal_lines = 0

    def _write_topics(self, name: str) -> None:
        """Make the change of topic ``name`` (its settings now, or its deletion) durable."""
        if self._journal_fd < 0 or self._journal_lines >= max(_JOURNAL_MIN, len(self.topics)):
            self._fold_journal()
            return
        line = msgspec.json.encode([name, self.topics.get(name)]) + b"\n"
        written = 0
        while written < len(line):
            written += os.write(self._journal_fd, line[written:])
        os.fsync(self._journal_fd)
        self._journal_lines += 1

    def _read_offsets(self, file_name: str) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        try:
            with open(os.path.join(self.data_dir, file_name)) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) == 3:
                        out[(parts[0], int(parts[1]))] = int(parts[2])
        except FileNotFoundError:
            pass
        return out


def read_topics(data_dir: str) -> dict[str, TopicConfig]:
    """The topics of a data directory: topics.json with the journal's changes applied.

    A last line cut short by a crash is left out: its change was never acknowledged.
    """
    topics: dict[str, TopicConfig] = {}
    try:
        with open(os.path.join(data_dir, _TOPICS_FILE), "rb") as f:
            topics = msgspec.json.decode(f.read(), type=dict[str, TopicConfig])
    except FileNotFoundError:
        pass
    try:
        with open(os.path.join(data_dir, _TOPICS_JOURNAL), "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        lines = []
    for line in lines[:-1]:  # the last piece is empty, or a line cut short
        try:
            name, config = _JOURNAL_LINE.decode(line)
        except msgspec.DecodeError:
            log.warning("topics journal: skipping an unreadable line in %s", data_dir)
            continue
        if config is None:
            topics.pop(name, None)
        else:
            topics[name] = config
    return topics
