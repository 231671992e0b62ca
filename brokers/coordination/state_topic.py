"""An internal compacted topic that holds a coordinator's state: ``__consumer_offsets`` for the group coordinator,
``__transaction_state`` for the transaction coordinator.

Each key the coordinator serves (a group id, a transactional id) belongs to one partition of the topic (crc32 of
the key, modulo the partition count); the broker that leads that partition coordinates the key. What the
coordinator must not forget is written to that partition as keyed records (msgpack lists as keys, msgpack values;
None deletes) and acknowledged only once every in-sync replica has it (acks=all). The latest record per key is
the state: when leadership of a partition moves here, its records are read back (``on_load``); when it moves
away, the coordinator drops what it held (``on_unload``).

Records written for a producer's transaction (the group coordinator's offsets committed in a transaction) are
a transactional batch of that producer: they count once the transaction's commit marker follows them in the
partition, never after an abort marker, and are handed to ``on_load`` apart while neither has come.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec
from tideway_server.brokers.replication import Role

from tideway.protocol import errors
from tideway.protocol import messages as m
from tideway.record.batch import (
    ATTRIBUTE_CONTROL,
    ATTRIBUTE_TRANSACTIONAL,
    BatchBuilder,
    decode_records,
    iter_batches,
    read_header,
)
from tideway.record.markers import read_marker

if TYPE_CHECKING:
    from tideway_server.brokers.server.metadata_cache import MetadataCache
    from tideway_server.brokers.server.replica_manager import ReplicaManager

__all__ = ["StateTopic", "partition_for_key"]

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 15.0
_ENCODE = msgspec.msgpack.encode
_DECODE = msgspec.msgpack.decode


def partition_for_key(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


class StateTopic:
    def __init__(
        self,
        name: str,
        *,
        partitions: int,
        settings: dict[str, str],
        broker_id: int,
        replicas: ReplicaManager,
        metadata: MetadataCache,
        create_topics: Callable[[m.CreateTopicsRequest], Awaitable[m.CreateTopicsResponse]],
        on_load: Callable[[int, dict[tuple, object], dict[int, dict[tuple, object]]], None],
        on_unload: Callable[[int], None],
        what: str,
    ) -> None:
        self.name = name
        self.partitions = partitions  # when this broker creates the topic
        self.settings = settings
        self.broker_id = broker_id
        self.replicas = replicas
        self.metadata = metadata
        self._create_topics = create_topics
        # (partition, {key: latest value}, {producer id: {key: value} of its open transaction}) once this broker leads it
        self._on_load = on_load
        self._on_unload = on_unload  # (partition) once it no longer does
        self.what = what  # what a key names, in errors: "group", "transactional id"
        self.loaded: dict[int, int] = {}  # partition -> the leader epoch its state was loaded in
        self._creating: asyncio.Task | None = None

    async def stop(self) -> None:
        if self._creating is not None:
            self._creating.cancel()

    def partition_count(self) -> int | None:
        return self.metadata.partition_count(self.name)

    def index_of(self, key: str) -> int | None:
        """The partition of ``key`` (None while the topic does not exist)."""
        count = self.partition_count()
        return None if count is None else partition_for_key(key, count)

    # -- who coordinates what -------------------------------------------------------------------

    def check(self, key: str) -> int:
        """The partition of ``key``; raise unless this broker coordinates it now."""
        count = self.partition_count()
        if count is None:
            self.ensure_created()
            raise errors.CoordinatorNotAvailableError(f"the topic {self.name} is being created")
        index = partition_for_key(key, count)
        partition = self.replicas.partitions.get((self.name, index))
        if partition is None or partition.role is not Role.LEADER:
            raise errors.NotCoordinatorError(f"broker {self.broker_id} does not coordinate {self.what} {key!r}")
        if self.loaded.get(index) != partition.leader_epoch:
            raise errors.CoordinatorLoadInProgressError(f"{self.what} {key!r} is being loaded")
        return index

    def coordinator_of(self, key: str, listener) -> m.FindCoordinatorResponse:
        """The broker that coordinates ``key``, at its address on ``listener``."""
        count = self.partition_count()
        if count is None:
            self.ensure_created()
            raise errors.CoordinatorNotAvailableError(f"the topic {self.name} is being created")
        index = partition_for_key(key, count)
        leader = self.metadata.leader_of(self.name, index)
        address = None if leader is None or leader < 0 else self.metadata.address_of(leader, listener)
        if address is None:
            raise errors.CoordinatorNotAvailableError(f"{self.name}-{index} has no leader right now")
        return m.FindCoordinatorResponse(node_id=leader, host=address[0], port=address[1])

    def on_roles_changed(self) -> None:
        """Load the partitions this broker now leads; drop the ones it no longer leads."""
        for (topic, index), partition in list(self.replicas.partitions.items()):
            if topic != self.name:
                continue
            leading = partition.role is Role.LEADER
            if leading and self.loaded.get(index) != partition.leader_epoch:
                self.unload(index)
                self._load(index)
                self.loaded[index] = partition.leader_epoch
            elif not leading and index in self.loaded:
                self.unload(index)
        for index in list(self.loaded):
            if (self.name, index) not in self.replicas.partitions:
                self.unload(index)

    def ensure_created(self) -> None:
        if self._creating is None or self._creating.done():
            self._creating = asyncio.get_running_loop().create_task(self._create())

    async def _create(self) -> None:
        metadata = self.metadata
        replication = min(3, max(1, len(metadata.brokers))) if metadata.cluster_mode else 1
        request = m.CreateTopicsRequest(topics=[m.NewTopic(
            name=self.name, partitions=self.partitions, replication_factor=replication, configs=self.settings)])
        try:
            response = await self._create_topics(request)
        except errors.TidewayError as exc:
            log.warning("could not create %s: %s", self.name, exc)
            return
        for result in response.topics:
            if result.error_code and result.error_code != errors.TopicAlreadyExistsError.errno:
                log.warning("could not create %s: %s", self.name, result.error_message)
            elif not result.error_code:
                log.info("created %s: %d partitions, replication factor %d", self.name, self.partitions, replication)
        if not metadata.cluster_mode:
            self.on_roles_changed()

    # -- reading and writing ------------------------------------------------------------------------

    def _load(self, index: int) -> None:
        started = time.monotonic()
        partition = self.replicas.partitions[(self.name, index)]
        log_ = partition.log
        latest: dict[tuple, object] = {}
        pending: dict[int, dict[tuple, object]] = {}  # open transactions' records, by producer id
        offset = log_.log_start_offset
        end = log_.log_end_offset
        while offset < end:
            read = log_.read(offset, 8 << 20, max_offset=end)
            if not read.records:
                break
            data = read.records
            for position, _base, _size in iter_batches(data):
                header = read_header(data, position)
                offset = header.next_offset
                if header.attributes & ATTRIBUTE_CONTROL:
                    written = pending.pop(header.producer_id, {})
                    if read_marker(data, position).commit:
                        latest.update(written)
                    continue
                into = pending.setdefault(header.producer_id, {}) if header.attributes & ATTRIBUTE_TRANSACTIONAL \
                    else latest
                for record in decode_records(data, position):
                    if record.key is not None:
                        into[tuple(_DECODE(record.key))] = None if record.value is None else _DECODE(record.value)
        self._on_load(index, latest, pending)
        log.info("coordinator for %s-%d (epoch %d): loaded %d keys in %.0f ms", self.name, index,
                 partition.leader_epoch, len(latest), (time.monotonic() - started) * 1000)

    def unload(self, index: int) -> None:
        if self.loaded.pop(index, None) is None:
            return
        self._on_unload(index)
        log.info("no longer coordinator for %s-%d", self.name, index)

    async def write(self, index: int, records: list[tuple[list, object]], *,
                    transaction: tuple[int, int] | None = None) -> None:
        """Append state records and return once every in-sync replica has them. With ``transaction`` (producer
        id, epoch) they belong to that producer's transaction: they count once its commit marker is written."""
        partition = self.replicas.partitions.get((self.name, index))
        if partition is None or partition.role is not Role.LEADER:
            raise errors.NotCoordinatorError(f"broker {self.broker_id} no longer coordinates {self.name}-{index}")
        builder = BatchBuilder() if transaction is None else BatchBuilder(
            producer_id=transaction[0], producer_epoch=transaction[1], flags=ATTRIBUTE_TRANSACTIONAL)
        now = int(time.time() * 1000)
        for key, value in records:
            builder.append(now, _ENCODE(key), None if value is None else _ENCODE(value))
        try:
            _appended, committed = partition.append_as_leader(bytearray(builder.build()), acks=m.ACKS_ALL)
        except errors.NotLeaderError as exc:
            raise errors.NotCoordinatorError(exc.message) from None
        self.replicas.wake(self.name, index)
        try:
            await asyncio.wait_for(asyncio.shield(committed), WRITE_TIMEOUT_S)
        except TimeoutError:
            raise errors.RequestTimedOutError(f"the {self.what}'s state was not replicated in time") from None
