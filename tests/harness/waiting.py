"""The one wait of the tests: poll a condition until it holds, or fail saying what was awaited (``wait_until`` in
plain code, ``eventually`` in an event loop)."""

from __future__ import annotations

import asyncio
import inspect
import time


def wait_until(predicate, timeout_s: float = 20.0, what: str = "condition", *, interval_s: float = 0.1):
    """``predicate()``'s first truthy value, polled every ``interval_s``; AssertionError naming ``what`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout_s}s")
        time.sleep(interval_s)


async def eventually(probe, timeout_s: float = 20.0, what: str = "condition", *, interval_s: float = 0.2):
    """``wait_until`` inside an event loop: ``await probe()`` (or ``probe()`` when it is no coroutine function)
    until it gives a truthy value, which is returned; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if inspect.isawaitable(value):
            value = await value
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached in {timeout_s}s")
        await asyncio.sleep(interval_s)
