"""One retry policy: exponential backoff with jitter, optionally bounded by a deadline.

Every loop that retries a request after a retriable error (the consumer's and
the replica fetcher's fetches, the group coordinator link, the gateway's reads,
a damaged replica's report, the HTTP SDK) takes its pauses from a ``Backoff``
instead of doubling a number by hand: the same shape everywhere, jitter so
that many clients that failed together do not retry together, and one place
to change it.

    backoff = Backoff(initial_s=0.05, max_s=1.0)
    while True:
        try:
            return await attempt()
        except RetriableError:
            if not await backoff.wait():   # False once the deadline would pass
                raise
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    initial_s: float = 0.05
    max_s: float = 1.0
    factor: float = 2.0
    jitter: float = 0.2  # each pause is drawn from [d * (1 - jitter), d]
    deadline_s: float | None = None  # give up once this long has passed since the first failure
    failures: int = 0
    _first_failure: float | None = field(default=None, repr=False)

    def delay(self) -> float:
        """The next pause (counting one more failure)."""
        self.failures += 1
        if self._first_failure is None:
            self._first_failure = time.monotonic()
        base = min(self.initial_s * self.factor ** (self.failures - 1), self.max_s)
        return base * (1 - self.jitter * random.random())

    def expired(self, pause_s: float = 0.0) -> bool:
        """True if a pause of ``pause_s`` would end past the deadline."""
        if self.deadline_s is None or self._first_failure is None:
            return False
        return time.monotonic() + pause_s - self._first_failure > self.deadline_s

    def reset(self) -> None:
        """A success: the next failure starts from ``initial_s`` again."""
        self.failures = 0
        self._first_failure = None

    async def wait(self, wakeup: asyncio.Event | None = None) -> bool:
        """Pause before the next attempt (cut short by ``wakeup``); False, without pausing, past the deadline."""
        pause = self.delay()
        if self.expired(pause):
            return False
        if wakeup is None:
            await asyncio.sleep(pause)
        else:
            try:
                await asyncio.wait_for(wakeup.wait(), pause)
            except TimeoutError:
                pass
        return True
