"""Tideway's Python SDK: publish and consume over the REST and WebSocket gateway.

    import tideway

    with tideway.Client("http://127.0.0.1:8000", api_key) as client:
        jobs = client.queue("jobs")
        jobs.publish(["hello", "world"])
        for message in jobs.receive("workers", wait_seconds=20):
            print(message.value)
            message.ack()

    async with tideway.AsyncClient("http://127.0.0.1:8000", api_key) as client:
        async for message in client.queue("jobs").subscribe("workers", prefetch=10):
            print(message.value)
            await message.ack()

Transient failures (connection errors, 429 with Retry-After, 502/503/504)
are retried with exponential backoff and jitter; publishes carry dedup ids so
a retried publish is never stored twice.
"""

from tideway.client import AsyncClient, AsyncQueue, Message
from tideway.errors import ApiError
from tideway.sync import Client, Queue

__all__ = ["ApiError", "AsyncClient", "AsyncQueue", "Client", "Message", "Queue"]
