"""Small asyncio helpers shared by the data plane."""

from __future__ import annotations

import asyncio

__all__ = ["cancel_and_wait"]


async def cancel_and_wait(*tasks: asyncio.Task | None) -> None:
    """Cancel ``tasks`` and wait until every one has really finished.

    One ``cancel()`` is not always enough on Python 3.11: ``asyncio.wait_for``
    swallows a cancellation that arrives just as its inner future completes,
    and a task looping around it then runs on. So cancel again until done.
    """
    pending = {task for task in tasks if task is not None and not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _done, pending = await asyncio.wait(pending, timeout=0.1)
