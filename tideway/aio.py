"""Small asyncio helpers shared by the data plane."""

from __future__ import annotations

import asyncio

__all__ = ["PromptFuture", "Signal", "cancel_and_wait", "resolve", "start_eagerly"]


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

    When it waits on a ``PromptFuture``, whoever completes that future can
    resume it at once (``PromptFuture.resume``) instead of on the task's turn.
    """
    try:
        yielded = coroutine.send(None)
    except StopIteration:
        return None
    return asyncio.get_running_loop().create_task(_carry_on(coroutine, yielded, _arm(coroutine, yielded)))


class PromptFuture(asyncio.Future):
    """A future whose waiter its completer can resume in its own call: ``set_result``, then ``resume``.

    Kafka's purgatory completes a delayed fetch inside the produce request
    that satisfied it; here a long-polling fetch parked on a PromptFuture is
    answered inside the produce that woke it, not a loop turn later (the
    produce's acknowledgement then follows at once, rather than another turn
    after that). Only a coroutine driven by ``start_eagerly`` can be resumed
    early; awaited by a plain task it is an ordinary future and ``resume`` does
    nothing.
    """

    _resume = None  # _carry_on's step while it waits on this future, then _TAKEN

    def resume(self) -> bool:
        """Call after completing it: run the waiting coroutine up to its next wait, now, unless it ran already.

        False if a plain task awaits it: the coroutine resumes on that task's next turn.
        """
        resume = self._resume
        if resume is None:
            return self.cancelled()
        self._resume = _TAKEN
        if resume is not _TAKEN and self.done() and not self.cancelled():
            resume()
        return True


_TAKEN = object()  # a PromptFuture's step was taken, early or by its task


def _arm(coroutine, yielded) -> _EarlyStep | None:
    """Let whoever completes ``yielded`` (if a PromptFuture) take ``coroutine``'s next step."""
    if type(yielded) is PromptFuture:
        early = yielded._resume = _EarlyStep(coroutine)
        return early
    return None


class _EarlyStep:
    """One step of a coroutine taken by a PromptFuture's completer; its task carries on from where it left it."""

    __slots__ = ("coroutine", "ran", "finished", "value", "error", "yielded")

    def __init__(self, coroutine) -> None:
        self.coroutine = coroutine
        self.ran = self.finished = False
        self.value = self.error = self.yielded = None

    def __call__(self) -> None:
        self.ran = True
        try:
            self.yielded = self.coroutine.send(None)
        except StopIteration as stop:
            self.finished, self.value = True, stop.value
        except BaseException as exc:  # noqa: BLE001 - raised by the task, never into the completer's call
            self.finished, self.error = True, exc


async def _carry_on(coroutine, yielded, early: _EarlyStep | None):
    """Drive ``coroutine`` from where it suspended, as a Task would: wait for what it yielded, then resume it.

    The coroutine reads the future's result or exception itself when resumed
    (``Future.__await__``). A cancellation of this task that did not cancel
    the awaited future (it had completed meanwhile) is thrown into the
    coroutine, as ``Task.cancel`` does. A coroutine already resumed by a
    PromptFuture's completer is carried on from where that step left it.
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
            if early is None:
                early = _arm(coroutine, yielded)
            try:
                await yielded
            except asyncio.CancelledError as exc:
                if not yielded.cancelled():
                    thrown = exc  # this task was cancelled, not the future
            except BaseException:  # noqa: BLE001 - the coroutine gets it from the future when resumed
                pass
            if early is not None:
                yielded._resume = _TAKEN
                took, early = early, None
                if took.ran:
                    if took.error is not None:
                        raise took.error
                    if took.finished:
                        return took.value
                    yielded, first = took.yielded, False
                    if thrown is None:
                        continue  # wait for what the early step stopped at
        first = False
        try:
            yielded = coroutine.send(None) if thrown is None else coroutine.throw(thrown)
        except StopIteration as stop:
            return stop.value
