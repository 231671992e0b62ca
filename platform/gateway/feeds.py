"""A queue group's deliveries, shared by every WebSocket of this process subscribed to it.

Each socket used to long-poll the brokers on its own: idle subscribers cost the
brokers in proportion to their number, and a tenant's own subscribers drained
its requests bucket. A feed keeps ``FEED_PUMPS`` receives going per (queue,
group, lock time), however many sockets it serves, each asking for the credit
its subscribers have free, and shares out what comes in turn among those with
room (a chunk each, the first in line moving on every time), so no subscriber
waits empty while others fill up. A message nobody has room for any more (its
subscriber left meanwhile) is released at once.

Ownership: the gateway's event loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from tideway_server.gateway import limits
from tideway_server.gateway.auth import Caller
from tideway_server.gateway.errors import GatewayError

from tideway.native.queue import Message, QueueConsumer
from tideway.protocol import errors as broker_errors

log = logging.getLogger(__name__)

FEED_PUMPS = 2  # while one receive waits for the brokers, another's messages are being pushed
RECEIVE_MAX = 1000  # messages one receive asks for at most
LONG_POLL_MS = 2000


class Subscriber(Protocol):
    caller: Caller

    def room(self) -> int:
        """Messages it may take now (its prefetch less what it holds unacknowledged)."""

    async def deliver(self, messages: list[Message]) -> bool:
        """Push ``messages``; False if it could not (it is gone): they go to others or back."""

    async def throttled(self, exc: GatewayError) -> None:
        """The tenant's consume rate is exhausted: tell the client to expect a pause."""


class Feed:
    def __init__(self, key: tuple, consumer: QueueConsumer, lock_ms: int) -> None:
        self.key = key
        self.consumer = consumer
        self.lock_ms = lock_ms
        self.subscribers: list[Subscriber] = []
        self.credit = asyncio.Event()  # set when a subscriber joins or frees credit
        self.asked = 0  # messages asked for by receives in flight
        self._no_receive_out = asyncio.Event()
        self._no_receive_out.set()
        self.owed_bytes = 0  # pushed but not yet charged to the tenant's consume bucket
        self._turn = 0  # who is first in line at the next share-out
        self._pumps: list[asyncio.Task] = []

    def join(self, subscriber: Subscriber) -> None:
        self.subscribers.append(subscriber)
        self.credit.set()
        self._pumps = [task for task in self._pumps if not task.done()]
        loop = asyncio.get_running_loop()
        while len(self._pumps) < FEED_PUMPS:
            self._pumps.append(loop.create_task(self._pump()))

    def leave(self, subscriber: Subscriber) -> None:
        # The feed lives on while a receive is out: a subscriber joining meanwhile (a reconnect) gets
        # what it brings; if nobody does, its pumps release that and the feed goes (see _pump).
        if subscriber in self.subscribers:
            self.subscribers.remove(subscriber)

    async def receives_back(self, timeout_s: float) -> None:
        """Return once no receive is out (or after ``timeout_s``).

        The last subscriber to leave waits for this before it releases what it
        holds: a receive still out would take those messages straight back, with
        nobody to give them to, and release them once more (a delivery wasted).
        """
        try:
            await asyncio.wait_for(self._no_receive_out.wait(), timeout_s)
        except TimeoutError:
            pass

    def wake(self) -> None:
        """A subscriber freed credit (it acknowledged or its locks ran out)."""
        self.credit.set()

    async def _pump(self) -> None:
        try:
            await self._pump_while_subscribed()
        finally:
            if not self.subscribers and all(task.done() or task is asyncio.current_task() for task in self._pumps):
                if _FEEDS.get(self.key) is self:
                    del _FEEDS[self.key]

    async def _pump_while_subscribed(self) -> None:
        while self.subscribers:
            room = min(sum(max(0, s.room()) for s in self.subscribers) - self.asked, RECEIVE_MAX)
            if room <= 0:
                self.credit.clear()
                try:
                    await asyncio.wait_for(self.credit.wait(), 1.0)  # locks also run out with no frame
                except TimeoutError:
                    pass
                continue
            self.asked += room
            self._no_receive_out.clear()
            try:
                await limits.take(self.subscribers[0].caller, requests=1, consume_bytes=self.owed_bytes, consuming=True)
                self.owed_bytes = 0
                messages = await self.consumer.receive(room, wait_ms=LONG_POLL_MS, lock_ms=self.lock_ms)
            except GatewayError as exc:
                await asyncio.gather(*(s.throttled(exc) for s in list(self.subscribers)), return_exceptions=True)
                await asyncio.sleep((exc.retry_after_ms or 1000) / 1000)
                continue
            except broker_errors.TidewayError as exc:
                log.info("feed %s: receive failed (%s); retrying", self.key, exc)
                await asyncio.sleep(0.5)
                continue
            finally:
                self.asked -= room
                if not self.asked:
                    self._no_receive_out.set()
            if messages:
                await self._share_out(messages)

    async def _share_out(self, messages: list[Message]) -> None:
        free = {s: s.room() for s in self._in_turn()}  # in turn order
        shares: dict[Subscriber, list[Message]] = {}
        given = 0
        last = None
        while given < len(messages):
            takers = [s for s, room in free.items() if room > 0]
            if not takers:
                break
            chunk = -(-(len(messages) - given) // len(takers))  # an equal share, rounded up
            for subscriber in takers:
                count = min(chunk, free[subscriber], len(messages) - given)
                shares.setdefault(subscriber, []).extend(messages[given:given + count])
                free[subscriber] -= count
                given += count
                last = subscriber
                if given == len(messages):
                    break
        if last is not None:  # the next share-out starts after the last subscriber given something
            self._turn = (self.subscribers.index(last) + 1) if last in self.subscribers else 0
        left = messages[given:]
        for subscriber, share in shares.items():
            if await subscriber.deliver(share):  # False once it has gone: its share goes back
                self.owed_bytes += sum(len(m.value or b"") + len(m.key or b"") for m in share)
            else:
                left += share
        if left:
            try:
                await self.consumer.nack(left, delay_ms=0, error="no subscriber had room for it")
            except broker_errors.TidewayError as exc:
                log.info("feed %s: %d messages not released (%s); their locks expire", self.key, len(left), exc)

    def _in_turn(self) -> list[Subscriber]:
        subscribers = self.subscribers
        if not subscribers:
            return []
        start = self._turn % len(subscribers)
        return subscribers[start:] + subscribers[:start]


_FEEDS: dict[tuple, Feed] = {}


def feed_for(key: tuple, consumer: QueueConsumer, lock_ms: int) -> Feed:
    """The feed of ``key`` (bootstrap, broker group, broker topic, lock ms), made on first use."""
    feed = _FEEDS.get(key)
    if feed is None:
        feed = _FEEDS[key] = Feed(key, consumer, lock_ms)
    return feed
