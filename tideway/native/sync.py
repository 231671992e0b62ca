"""Blocking wrappers over the async client, for scripts and threads.

Each wrapper owns an event loop in a background thread and forwards calls to
it. ``SyncProducer.send_many`` hands a whole list over in one hop; use it (or
the async API) when throughput matters.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterable
from typing import Any, TypeVar

from tideway.native.client import TidewayClient
from tideway.native.consumer import Consumer, TopicPartition
from tideway.native.group import GroupConsumer
from tideway.native.producer import Producer, RecordMetadata
from tideway.native.queue import Message, QueueConsumer
from tideway.record.batch import Record

__all__ = ["SyncClient", "SyncConsumer", "SyncGroupConsumer", "SyncProducer", "SyncQueueConsumer"]

T = TypeVar("T")


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="tideway-client", daemon=True)
        self._thread.start()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout_s)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        self.loop.close()


class SyncClient:
    """Topic admin and metadata, blocking."""

    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self.client = self._loop.run(self._make(bootstrap, kwargs))

    @staticmethod
    async def _make(bootstrap: str, kwargs: dict) -> TidewayClient:
        client = TidewayClient(bootstrap, **kwargs)
        await client.start()
        return client

    def create_topic(self, name: str, **kwargs: Any) -> None:
        self._loop.run(self.client.create_topic(name, **kwargs))

    def delete_topic(self, name: str) -> None:
        self._loop.run(self.client.delete_topic(name))

    def list_topics(self) -> list[str]:
        return self._loop.run(self.client.list_topics())

    def describe_topics(self, names: list[str] | None = None):
        return self._loop.run(self.client.describe_topics(names))

    def close(self) -> None:
        self._loop.run(self.client.close())
        self._loop.stop()

    def __enter__(self) -> SyncClient:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class SyncProducer:
    """A Producer driven from blocking code."""

    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self.producer = Producer(bootstrap, **kwargs)
        self._loop.run(self.producer.start())

    def send(self, topic: str, value: bytes | None, **kwargs: Any) -> RecordMetadata:
        """Send one record and wait for its acknowledgement."""
        return self._loop.run(self.producer.send_and_wait(topic, value, **kwargs))

    def send_many(self, topic: str, values: Iterable[bytes | None], *, key: bytes | None = None) -> list[RecordMetadata]:
        """Send many records in one hop and wait for all their acknowledgements."""
        return self._loop.run(self._send_many(topic, list(values), key))

    async def _send_many(self, topic: str, values: list[bytes | None], key: bytes | None) -> list[RecordMetadata]:
        futures = [await self.producer.send(topic, value, key=key) for value in values]
        return [await future for future in futures]

    def flush(self) -> None:
        self._loop.run(self.producer.flush())

    def close(self) -> None:
        self._loop.run(self.producer.stop())
        self._loop.stop()

    def __enter__(self) -> SyncProducer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class SyncConsumer:
    """A Consumer driven from blocking code."""

    def __init__(self, bootstrap: str, **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self.consumer = Consumer(bootstrap, **kwargs)
        self._loop.run(self.consumer.start())

    def assign(self, partitions: list[TopicPartition], *, start: str | int = "committed") -> None:
        self._loop.run(self.consumer.assign(partitions, start=start))

    def seek(self, tp: TopicPartition, start: str | int) -> None:
        self._loop.run(self.consumer.seek(tp, start))

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        return self._loop.run(self.consumer.getmany(timeout_ms, max_records))

    def position(self, tp: TopicPartition) -> int:
        return self.consumer.position(tp)

    def close(self) -> None:
        self._loop.run(self.consumer.stop())
        self._loop.stop()

    def __enter__(self) -> SyncConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class SyncGroupConsumer:
    """A GroupConsumer (stream group member) driven from blocking code."""

    def __init__(self, bootstrap: str, group_id: str, topics: list[str], **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self.member = self._loop.run(self._make(bootstrap, group_id, topics, kwargs))

    @staticmethod
    async def _make(bootstrap: str, group_id: str, topics: list[str], kwargs: dict) -> GroupConsumer:
        member = GroupConsumer(bootstrap, group_id, topics, **kwargs)
        await member.start()
        return member

    def poll(self, timeout_ms: int = 1000, max_records: int | None = None) -> dict[TopicPartition, list[Record]]:
        return self._loop.run(self.member.getmany(timeout_ms, max_records))

    def commit(self, offsets: dict[TopicPartition, int] | None = None) -> None:
        self._loop.run(self.member.commit(offsets=offsets))

    def seek(self, tp: TopicPartition, start: str | int) -> None:
        self._loop.run(self.member.seek(tp, start))

    def assignment(self) -> list[TopicPartition]:
        return self.member.assignment()

    def close(self) -> None:
        self._loop.run(self.member.stop())
        self._loop.stop()

    def __enter__(self) -> SyncGroupConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class SyncQueueConsumer:
    """A QueueConsumer driven from blocking code (receive, ack, nack, reject, extend)."""

    def __init__(self, bootstrap: str, group_id: str, topic: str, **kwargs: Any) -> None:
        self._loop = _LoopThread()
        self.queue = self._loop.run(self._make(bootstrap, group_id, topic, kwargs))

    @staticmethod
    async def _make(bootstrap: str, group_id: str, topic: str, kwargs: dict) -> QueueConsumer:
        queue = QueueConsumer(bootstrap, group_id, topic, **kwargs)
        await queue.start()
        return queue

    def receive(self, max_messages: int = 10, *, wait_ms: int = 0, lock_ms: int = 0) -> list[Message]:
        return self._loop.run(self.queue.receive(max_messages, wait_ms=wait_ms, lock_ms=lock_ms))

    # ack, nack and reject return futures made on the loop's own thread: called there, awaited there.
    def ack(self, messages: list[Message | str]) -> None:
        self._loop.run(_awaited(self.queue.ack, messages))

    def nack(self, messages: list[Message | str], *, delay_ms: int | None = None, error: str = "") -> None:
        self._loop.run(_awaited(self.queue.nack, messages, delay_ms=delay_ms, error=error))

    def reject(self, messages: list[Message | str], *, error: str = "") -> None:
        self._loop.run(_awaited(self.queue.reject, messages, error=error))

    def extend(self, messages: list[Message | str], lock_ms: int) -> list[int]:
        return self._loop.run(self.queue.extend(messages, lock_ms))

    def close(self) -> None:
        self._loop.run(self.queue.stop())
        self._loop.stop()

    def __enter__(self) -> SyncQueueConsumer:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


async def _awaited(call, *args, **kwargs):
    return await call(*args, **kwargs)
