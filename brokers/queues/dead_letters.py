"""Dead letters: records past their delivery limit, or rejected, written to the queue's dead-letter topic.

A background task writes them with the headers below, then marks them done and writes that state. A crash
between the two writes can put a record in the dead-letter topic twice, never zero times. A reject (or a
release at the delivery limit) waits for its dead letter's write, up to DEAD_LETTER_WAIT_S, so that a redrive
or a listing started at once sees it.

Ownership: the broker's event-loop thread.
"""

from __future__ import annotations

import asyncio
import logging

from tideway_server.brokers.queues.held import Coordinator, HeldShares, ShareState, settings_of
from tideway_server.brokers.queues.persistence import StateWriter
from tideway_server.brokers.queues.share_partition import State
from tideway_server.brokers.queues.window import WindowReader
from tideway_server.brokers.storage import TopicConfig

from tideway.protocol import errors
from tideway.protocol.headers import DLQ_HEADERS
from tideway.protocol.names import own_group_name, split_tenant_prefix

log = logging.getLogger(__name__)

DEAD_LETTER_WAIT_S = 5.0  # how long a reject (or a release at the delivery limit) waits for its dead letter's write


class DeadLetterWriter:
    def __init__(self, held: HeldShares, coordinator: Coordinator, reader: WindowReader, writer: StateWriter) -> None:
        self.held = held
        self.coordinator = coordinator
        self.reader = reader
        self.writer = writer
        self._due = asyncio.Event()
        self._written = asyncio.Condition()  # notified after every pass that wrote dead letters
        self._producer = None

    def due(self) -> None:
        """Something may have records to dead-letter: the background task looks now."""
        self._due.set()

    async def stop(self) -> None:
        if self._producer is not None:
            await self._producer.stop()

    async def run_forever(self) -> None:
        while True:
            try:
                await asyncio.wait_for(self._due.wait(), 1.0)
            except TimeoutError:
                pass
            self._due.clear()
            try:
                await self._write_all()
                async with self._written:
                    self._written.notify_all()
            except asyncio.CancelledError:
                raise
            except errors.TidewayError as exc:
                log.warning("dead-lettering failed (will retry): %s", exc)
                await asyncio.sleep(0.5)
                self._due.set()
            except Exception:
                log.exception("dead-lettering failed (will retry)")
                await asyncio.sleep(1)
                self._due.set()

    async def written(self, states: list[ShareState], group_id: str, topic: str) -> None:
        """Return once ``states``' dead letters are written, or after DEAD_LETTER_WAIT_S (they will be)."""
        try:
            await asyncio.wait_for(self._until_written(states), DEAD_LETTER_WAIT_S)
        except TimeoutError:
            log.info("group %s: dead letters of %s not written within %.0f s; they will be", group_id, topic,
                     DEAD_LETTER_WAIT_S)

    async def _until_written(self, states: list[ShareState]) -> None:
        async with self._written:
            while any(state.share.dead_lettering() for state in states if self.held.holds(state)):
                await self._written.wait()

    async def _write_all(self) -> None:
        coordinator = self.coordinator
        # Restored share-partitions with records to dead-letter must be read first.
        for key, snapshot in list(self.held.restored.items()):
            if any(row[1] in (State.DEAD_LETTERING, State.ACQUIRED) for row in snapshot["entries"]):
                try:
                    config = coordinator.topic_config(key[1])
                except errors.UnknownTopicOrPartitionError:
                    continue
                state = await self.held.load(*key, settings_of(config), self.reader.log_start)
                await self.reader.read_restored(state, config)
        for state in list(self.held.loaded.values()):
            offsets = state.share.dead_lettering()
            if offsets:
                await self._write(state, offsets)

    async def _write(self, state: ShareState, offsets: list[int]) -> None:
        coordinator = self.coordinator
        try:
            config = coordinator.topic_config(state.topic)
            index = coordinator.check_coordinator(state.group_id)
        except errors.BrokerError:
            return
        dlq = config.dead_letter_topic_for(state.topic)
        producer = await self._dlq_producer()
        await self._ensure_topic(dlq, config)
        futures = []
        for offset in offsets:
            record = state.records.get(offset)
            entry = state.share.entry(offset)
            if record is None or entry is None:
                continue
            headers = [h for h in record.headers if h[0] not in DLQ_HEADERS] + [
                ("tideway-dlq-origin-topic", split_tenant_prefix(state.topic)[1].encode()),  # the tenant's own name
                ("tideway-dlq-origin-partition", str(state.partition).encode()),
                ("tideway-dlq-origin-offset", str(offset).encode()),
                ("tideway-dlq-group", own_group_name(state.group_id).encode()),
                ("tideway-dlq-delivery-count", str(entry.count).encode()),
                ("tideway-dlq-last-error", entry.error.encode()),
                ("tideway-dlq-first-delivery-ms", str(entry.first_ms).encode()),
                ("tideway-dlq-last-delivery-ms", str(entry.last_ms).encode()),
            ]
            future = await producer.send(dlq, record.value, key=record.key, headers=headers, timestamp_ms=record.timestamp_ms)
            futures.append((offset, future))
        for offset, future in futures:
            await future
            state.share.dead_lettered(offset)
            state.records.pop(offset, None)
            log.info("group %s: %s-%d offset %d dead-lettered to %s", state.group_id, state.topic, state.partition, offset, dlq)
        if futures:
            state.version += 1
            await self.writer.persist(index, state)

    async def _dlq_producer(self):
        if self._producer is None:
            from tideway.native.producer import Producer

            producer = Producer(await self.reader.cluster_client(), acks="all", linger_ms=1, delivery_timeout_ms=30_000)
            await producer.start()
            self._producer = producer
        return self._producer

    async def _ensure_topic(self, name: str, config: TopicConfig) -> None:
        client = await self.reader.cluster_client()
        try:
            await client.partitions_for(name)
            return
        except errors.UnknownTopicOrPartitionError:
            pass
        try:
            await client.create_topic(name, partitions=1, replication_factor=config.replication_factor)
            log.info("created dead-letter topic %s", name)
        except errors.TopicAlreadyExistsError:
            pass
        for _ in range(50):
            try:
                await client.refresh_metadata([name])
                partitions = await client.partitions_for(name)
                if all(p.leader >= 0 for p in partitions):
                    return
            except errors.UnknownTopicOrPartitionError:
                pass
            await asyncio.sleep(0.1)
