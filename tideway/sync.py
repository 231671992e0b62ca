"""The synchronous client: the asynchronous one, run on an event loop in a background thread."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable, Iterator

from tideway.client import AsyncClient, AsyncQueue, Message


class Client:
    def __init__(self, base_url: str, api_key: str | None = None, **options) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="tideway-client", daemon=True)
        self._thread.start()
        self._async = self._run(_make(base_url, api_key, options))

    def _run(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def close(self) -> None:
        self._run(self._async.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def queue(self, name: str) -> Queue:
        return Queue(self, self._async.queue(name))

    def token(self, **options) -> str:
        return self._run(self._async.token(**options))


async def _make(base_url: str, api_key: str | None, options: dict) -> AsyncClient:
    return AsyncClient(base_url, api_key, **options)  # built on the client's loop


class SyncMessage:
    """A delivered message whose ack/nack/extend block."""

    def __init__(self, client: Client, message: Message) -> None:
        self._client, self._message = client, message

    def __getattr__(self, name: str):
        return getattr(self._message, name)

    def __repr__(self) -> str:
        return repr(self._message)

    def ack(self) -> None:
        self._client._run(self._message.ack())

    def nack(self, delay_seconds: float | None = None) -> None:
        self._client._run(self._message.nack(delay_seconds))

    def extend(self, seconds: float) -> None:
        self._client._run(self._message.extend(seconds))


class Queue:
    def __init__(self, client: Client, queue: AsyncQueue) -> None:
        self._client, self._queue = client, queue
        self.name = queue.name

    def publish(self, messages: Iterable) -> list[dict]:
        return self._client._run(self._queue.publish(list(messages)))

    def receive(self, group: str, **options) -> list[SyncMessage]:
        return [SyncMessage(self._client, m) for m in self._client._run(self._queue.receive(group, **options))]

    def ack(self, group: str, receipts: list[str]) -> None:
        self._client._run(self._queue.ack(group, receipts))

    def nack(self, group: str, receipts: list[str], **options) -> None:
        self._client._run(self._queue.nack(group, receipts, **options))

    def peek(self, max_messages: int = 10) -> list[Message]:
        return self._client._run(self._queue.peek(max_messages))

    def read(self, partition: int, offset: int | str = "earliest", **options) -> tuple[list[Message], int]:
        return self._client._run(self._queue.read(partition, offset, **options))

    def commit(self, group: str, offsets: dict[int, int]) -> None:
        self._client._run(self._queue.commit(group, offsets))

    def committed(self, group: str) -> dict[int, int]:
        return self._client._run(self._queue.committed(group))

    def seek(self, group: str, **options) -> dict[int, int]:
        return self._client._run(self._queue.seek(group, **options))

    def dead_letters(self, limit: int = 100) -> list[Message]:
        return self._client._run(self._queue.dead_letters(limit))

    def redrive(self, **options) -> str:
        return self._client._run(self._queue.redrive(**options))

    def redrive_status(self, job_id: str) -> dict:
        return self._client._run(self._queue.redrive_status(job_id))

    def subscribe(self, group: str, **options) -> Iterator[SyncMessage]:
        """Pushed messages, one at a time (blocking); ack each."""
        stream = self._queue.subscribe(group, **options)
        try:
            while True:
                yield SyncMessage(self._client, self._client._run(stream.__anext__()))
        except StopAsyncIteration:
            return
        finally:
            self._client._run(stream.aclose())
