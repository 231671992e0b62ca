"""The asynchronous client (httpx for REST, websockets for subscriptions)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import uuid
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

import httpx
import websockets

from tideway.errors import ApiError
from tideway.retry import Backoff

log = logging.getLogger("tideway")


@dataclass
class Message:
    """A delivered message. Queue deliveries carry a receipt: ack, nack or extend it."""

    value: bytes | None
    key: bytes | None
    headers: dict[str, str]
    partition: int
    offset: int
    timestamp: int
    receipt: str | None = None
    delivery_count: int = 0
    _settle: object = field(default=None, repr=False)

    @property
    def text(self) -> str | None:
        return None if self.value is None else self.value.decode()

    async def ack(self) -> None:
        await self._settle("ack", [self.receipt])

    async def nack(self, delay_seconds: float | None = None) -> None:
        await self._settle("nack", [self.receipt], delay_seconds=delay_seconds)

    async def extend(self, seconds: float) -> None:
        await self._settle("extend", [self.receipt], seconds=seconds)


def _bytes(entry: dict, name: str) -> bytes | None:
    if f"{name}_base64" in entry:
        return base64.b64decode(entry[f"{name}_base64"])
    text = entry.get(name)
    return None if text is None else text.encode()


def _message(entry: dict, settle) -> Message:
    return Message(value=_bytes(entry, "value"), key=_bytes(entry, "key"), headers=entry.get("headers", {}),
                   partition=entry["partition"], offset=entry["offset"], timestamp=entry.get("timestamp", 0),
                   receipt=entry.get("receipt"), delivery_count=entry.get("delivery_count", 0), _settle=settle)


def _outgoing(item) -> dict:
    """A publishable message from a str, bytes or dict (``value``, ``key``, ``headers``, ``deliver_at``, ``dedup_id``)."""
    if isinstance(item, dict):
        out = dict(item)
        for name in ("value", "key"):
            if isinstance(out.get(name), bytes):
                out[f"{name}_base64"] = base64.b64encode(out.pop(name)).decode()
    elif isinstance(item, bytes):
        out = {"value_base64": base64.b64encode(item).decode()}
    else:
        out = {"value": str(item)}
    out.setdefault("dedup_id", uuid.uuid4().hex)  # makes retries safe
    return out


class AsyncClient:
    def __init__(self, base_url: str, api_key: str | None = None, *, timeout: float = 60.0, max_retries: int = 8,
                 backoff_seconds: float = 0.2, backoff_max_seconds: float = 10.0) -> None:
        api_key = api_key or os.environ.get("TIDEWAY_API_KEY", "").strip()
        if not api_key:
            raise ValueError("no API key: pass api_key= or set TIDEWAY_API_KEY (keys are made in the console or "
                             "with POST /api/v1/keys/)")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.max_retries = max_retries
        self.backoff_seconds, self.backoff_max_seconds = backoff_seconds, backoff_max_seconds
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout,
                                       headers={"Authorization": f"Bearer {api_key}", "User-Agent": "tideway-python"})

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    def queue(self, name: str) -> AsyncQueue:
        return AsyncQueue(self, name)

    async def token(self, *, ttl_seconds: int = 300, scopes: list[str] | None = None, queues: list[str] | None = None) -> str:
        """A short-lived token for a browser (no API key in its page or URL)."""
        body = {"ttl_seconds": ttl_seconds, **({"scopes": scopes} if scopes else {}), **({"queues": queues} if queues else {})}
        return (await self.request("POST", "/api/v1/tokens", body))["token"]

    def backoff(self) -> Backoff:
        """The pauses between retries (the same policy as the brokers' clients), within this client's settings."""
        return Backoff(initial_s=self.backoff_seconds, max_s=self.backoff_max_seconds, jitter=0.5)

    async def request(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        """One API call; transient failures are retried with backoff (honouring Retry-After)."""
        backoff = self.backoff()
        while True:
            try:
                answer = await self._http.request(method, path, json=body, params=params)
            except httpx.TransportError as exc:
                if backoff.failures >= self.max_retries:
                    raise
                delay = backoff.delay()
                log.info("tideway: %s %s failed (%s); retrying in %.2f s", method, path, exc, delay)
            else:
                if answer.status_code < 400:
                    return answer.json()
                try:
                    shape = answer.json()
                except ValueError:
                    shape = {"code": "error", "message": answer.text[:200]}
                error = ApiError(answer.status_code, shape.get("code", "error"), shape.get("message", ""), shape.get("details"))
                if not error.transient or backoff.failures >= self.max_retries:
                    raise error
                delay = backoff.delay()
                retry_after = answer.headers.get("Retry-After")
                if retry_after:
                    delay = float(retry_after)
                log.info("tideway: %s %s: %s; retrying in %.2f s", method, path, error, delay)
            await asyncio.sleep(delay)


class AsyncQueue:
    def __init__(self, client: AsyncClient, name: str) -> None:
        self.client, self.name = client, name
        self.path = f"/api/v1/queues/{name}"

    async def publish(self, messages: Iterable) -> list[dict]:
        """Publish values (str, bytes or dicts); returns ``{"partition", "offset"}`` per message once stored.

        A retried publish whose messages were already stored is answered with
        where they are (dedup ids make the retry harmless).
        """
        batch = [_outgoing(m) for m in messages]
        placed: dict[str, dict] = {}
        pending = batch
        while pending:
            try:
                answer = await self.client.request("POST", f"{self.path}/messages", {"messages": pending})
            except ApiError as exc:
                if exc.code != "duplicate_message":
                    raise
                for duplicate in exc.details.get("duplicates", []):  # stored by an earlier attempt
                    placed[duplicate["dedup_id"]] = {"partition": duplicate["partition"], "offset": duplicate["offset"]}
                pending = [m for m in pending if m["dedup_id"] not in placed]
                continue
            for message, where in zip(pending, answer["messages"], strict=True):
                placed[message["dedup_id"]] = where
            pending = []
        return [placed[m["dedup_id"]] for m in batch]

    async def receive(self, group: str, *, max_messages: int = 10, wait_seconds: float = 0,
                      visibility_timeout: float | None = None) -> list[Message]:
        body = {"max_messages": max_messages, "wait_seconds": wait_seconds}
        if visibility_timeout is not None:
            body["visibility_timeout"] = visibility_timeout
        answer = await self.client.request("POST", f"{self.path}/groups/{group}/receive", body)
        settle = self._settler(group)
        return [_message(m, settle) for m in answer["messages"]]

    def _settler(self, group: str):
        async def settle(action: str, receipts: list[str], **extra) -> dict:
            body = {"receipts": receipts, **{k: v for k, v in extra.items() if v is not None}}
            return await self.client.request("POST", f"{self.path}/groups/{group}/{action}", body)

        return settle

    async def ack(self, group: str, receipts: list[str]) -> None:
        await self._settler(group)("ack", receipts)

    async def nack(self, group: str, receipts: list[str], *, delay_seconds: float | None = None) -> None:
        await self._settler(group)("nack", receipts, delay_seconds=delay_seconds)

    async def peek(self, max_messages: int = 10) -> list[Message]:
        answer = await self.client.request("GET", f"{self.path}/messages", params={"max_messages": max_messages})
        return [_message(m, None) for m in answer["messages"]]

    async def read(self, partition: int, offset: int | str = "earliest", *, max_messages: int = 100,
                   wait_seconds: int = 0) -> tuple[list[Message], int]:
        """Stream reads: (messages, next offset) from ``offset`` (a number, "earliest" or "latest")."""
        params = {"max_messages": max_messages, "wait_seconds": wait_seconds}
        params.update({"offset": offset} if isinstance(offset, int) else {"from": offset})
        answer = await self.client.request("GET", f"{self.path}/partitions/{partition}/messages", params=params)
        return [_message(m, None) for m in answer["messages"]], answer["next_offset"]

    async def commit(self, group: str, offsets: dict[int, int]) -> None:
        body = {"offsets": [{"partition": p, "offset": o} for p, o in offsets.items()]}
        await self.client.request("POST", f"{self.path}/groups/{group}/offsets", body)

    async def committed(self, group: str) -> dict[int, int]:
        answer = await self.client.request("GET", f"{self.path}/groups/{group}/offsets")
        return {p["partition"]: p["committed"] for p in answer["partitions"]}

    async def seek(self, group: str, *, to: str | None = None, offset: int | None = None, timestamp: int | None = None) -> dict[int, int]:
        body = {k: v for k, v in (("to", to), ("offset", offset), ("timestamp", timestamp)) if v is not None}
        answer = await self.client.request("POST", f"{self.path}/groups/{group}/seek", body)
        return {p["partition"]: p["offset"] for p in answer["offsets"]}

    async def dead_letters(self, limit: int = 100) -> list[Message]:
        answer = await self.client.request("GET", f"{self.path}/dead-letters", params={"limit": limit})
        return [_message(m, None) for m in answer["messages"]]

    async def redrive(self, *, rate_per_s: float = 100.0, limit: int | None = None) -> str:
        """Start moving dead letters back; returns the job id (see ``redrive_status``)."""
        return (await self.client.request("POST", f"{self.path}/dead-letters/redrive", {"rate_per_s": rate_per_s, "limit": limit}))["job_id"]

    async def redrive_status(self, job_id: str) -> dict:
        return await self.client.request("GET", f"{self.path}/dead-letters/redrives/{job_id}")

    async def subscribe(self, group: str, *, prefetch: int = 10, visibility_timeout: float | None = None) -> AsyncIterator[Message]:
        """Messages pushed over a WebSocket, at most ``prefetch`` unacknowledged; reconnects after failures.

        Ack (or nack) each message: unacknowledged ones hold the credit, and
        come back to the queue when the connection closes.
        """
        url = self.client.base_url.replace("https://", "wss://").replace("http://", "ws://") + f"/ws/v1/queues/{self.name}"
        backoff = self.client.backoff()
        while True:
            try:
                async with websockets.connect(url, additional_headers={"Authorization": f"Bearer {self.client.api_key}"}) as ws:
                    subscribe = {"type": "subscribe", "group": group, "prefetch": prefetch}
                    if visibility_timeout is not None:
                        subscribe["visibility_timeout"] = visibility_timeout
                    await ws.send(json.dumps(subscribe))

                    async def settle(action: str, receipts: list[str], **extra) -> None:
                        await ws.send(json.dumps({"type": action, "receipts": receipts, **{k: v for k, v in extra.items() if v is not None}}))

                    async for raw in ws:
                        frame = json.loads(raw)
                        if frame["type"] == "messages":
                            backoff.reset()
                            for entry in frame["messages"]:
                                yield _message(entry, settle)
                        elif frame["type"] == "error" and frame.get("id") is None and frame.get("code") in (
                                "unauthenticated", "invalid_credentials", "forbidden", "queue_not_found", "not_found", "wrong_mode"):
                            raise ApiError(frame.get("error_code", 400), frame["code"], frame["message"], frame.get("details"))
            except (OSError, websockets.WebSocketException) as exc:
                if backoff.failures >= self.client.max_retries:
                    raise
                delay = backoff.delay()
                log.info("tideway: subscription to %s lost (%s); reconnecting in %.2f s", self.name, exc, delay)
                await asyncio.sleep(delay)
