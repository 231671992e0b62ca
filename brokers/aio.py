"""Small asyncio helpers shared by the data plane."""

from __future__ import annotations

import asyncio

__all__ = ["Signal", "cancel_and_wait", "resolve", "start_eagerly"]


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


class Signal:
    """An event to wait on with a timeout, made for hot paths.

    ``await asyncio.wait_for(event.wait(), timeout)`` makes a task and a timer
    on every call (Python 3.11), and the waiter resumes three loop iterations
    after ``set()``; here a wait is one future and one timer handle, and the
    waiter resumes on the next iteration. ``wait`` returns whether it was set.
    """

    __slots__ = ("_set", "_waiters")

    def __init__(self) -> None:
        self._set = False
        self._waiters: list[asyncio.Future] = []

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        self._set = True
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(True)

    def clear(self) -> None:
        self._set = False

    async def wait(self, timeout_s: float | None = None) -> bool:
        if self._set:
            return True
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        self._waiters.append(waiter)
        timer = None if timeout_s is None else loop.call_later(timeout_s, resolve, waiter, False)
        try:
            return await waiter
        finally:
            if timer is not None:
                timer.cancel()
            if waiter in self._waiters:
                self._waiters.remove(waiter)


def resolve(future: asyncio.Future, value=None) -> None:
    """Give ``future`` its result unless it has one: what a timer calls to end a wait (``loop.call_later``)."""
    if not future.done():
        future.set_result(value)


def start_eagerly(coroutine) -> asyncio.Task | None:
    """Run ``coroutine`` now up to its first suspension; a task carries it on from there (None if it finished).

    What Python 3.12's eager task factory does, for one hot call site: a
    request that can be answered without waiting is answered in the callback
    that read it, not on a later loop iteration (a loop turn costs 10 µs or
    more on a cold, busy machine, and every request paid one). Until it first
    suspends, the coroutine runs outside any task (``asyncio.current_task()``
    is None there); an exception it raises in that part is raised here.
    """
    try:
        yielded = coroutine.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_carry_on(coroutine, yielded))


async def _carry_on(coroutine, yielded):
    """Drive ``coroutine`` from where it suspended, as a Task would: wait for what it yielded, then resume it.

    The coroutine reads the future's result or exception itself when resumed
    (``Future.__await__``). A cancellation of this task that did not cancel
    the awaited future (it had completed meanwhile) is thrown into the
    coroutine, as ``Task.cancel`` does.
    """
    first = True
    while True:
        thrown: BaseException | None = None
        if yielded is None:  # a bare yield (asyncio.sleep(0)): one loop turn
            if not first:
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError as exc:
                    thrown = exc
        elif not asyncio.isfuture(yielded):
            thrown = RuntimeError(f"coroutine yielded {yielded!r}, not a future")
        else:
            yielded._asyncio_future_blocking = False  # as Task does with a yielded future, so it can be awaited here
            try:
                await yielded
            except asyncio.CancelledError as exc:
                if not yielded.cancelled():
                    thrown = exc  # this task was cancelled, not the future
            except BaseException:  # noqa: BLE001 - the coroutine gets it from the future when resumed
                pass
        first = False
        try:
            yielded = coroutine.send(None) if thrown is None else coroutine.throw(thrown)
        except StopIteration as stop:
            return stop.value
