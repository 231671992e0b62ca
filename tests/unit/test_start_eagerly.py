"""tideway.aio.start_eagerly: how a broker connection runs each request's handler (up to its first wait at once),
and PromptFuture: how a produce answers the long-polling fetches it woke inside its own call."""

import asyncio

import pytest

from tideway.aio import PromptFuture, start_eagerly


async def test_a_coroutine_that_never_waits_finishes_inside_the_call():
    steps = []

    async def answer():
        steps.append("ran")
        return 42

    assert start_eagerly(answer()) is None
    assert steps == ["ran"]  # no loop turn needed


async def test_the_part_before_the_first_wait_runs_at_once_and_a_task_finishes_the_rest():
    steps = []
    loop = asyncio.get_running_loop()
    gate = loop.create_future()

    async def handler():
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        await asyncio.sleep(0)  # a bare yield, then a real timer
        await asyncio.sleep(0.01)
        return value * 2

    task = start_eagerly(handler())
    assert steps == ["before"] and task is not None and not task.done()
    loop.call_soon(gate.set_result, 21)
    assert await task == 42
    assert steps == ["before", "after 21"]


async def test_a_bare_yield_lets_callbacks_scheduled_before_it_run_first():
    order = []
    loop = asyncio.get_running_loop()

    async def handler():
        loop.call_soon(order.append, "scheduled earlier")
        await asyncio.sleep(0)
        order.append("handler resumed")

    await start_eagerly(handler())
    assert order == ["scheduled earlier", "handler resumed"]


async def test_a_futures_exception_is_raised_inside_the_coroutine():
    loop = asyncio.get_running_loop()
    failing = loop.create_future()

    async def handler():
        try:
            await failing
        except KeyError as exc:
            return f"caught {exc.args[0]}"

    task = start_eagerly(handler())
    failing.set_exception(KeyError("boom"))
    assert await task == "caught boom"


async def test_cancelling_the_task_cancels_the_coroutine_where_it_waits():
    loop = asyncio.get_running_loop()
    never = loop.create_future()
    cleaned = []

    async def handler():
        try:
            await never
        finally:
            cleaned.append(True)

    task = start_eagerly(handler())
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True] and never.cancelled()


async def test_a_cancel_after_the_awaited_future_completed_still_reaches_the_coroutine():
    loop = asyncio.get_running_loop()
    gate = loop.create_future()
    seen = []

    async def handler():
        try:
            await gate
            seen.append("resumed normally")
        except asyncio.CancelledError:
            seen.append("cancelled")
            raise

    task = start_eagerly(handler())
    await asyncio.sleep(0)  # the task waits on the gate now
    gate.set_result(None)  # its wake-up is scheduled, not run ...
    task.cancel()  # ... when it is cancelled: as with a Task, the coroutine gets the CancelledError
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["cancelled"]


async def test_an_exception_before_the_first_wait_is_raised_by_the_call():
    async def broken():
        raise ValueError("bad")

    with pytest.raises(ValueError):
        start_eagerly(broken())


async def test_a_prompt_futures_completer_resumes_its_waiter_inside_its_own_call():
    steps = []
    loop = asyncio.get_running_loop()
    parked = PromptFuture(loop=loop)

    async def fetch():
        steps.append("parked")
        value = await parked
        steps.append(f"answered {value}")
        return value

    task = start_eagerly(fetch())
    parked.set_result(7)
    assert parked.resume() is True
    assert steps == ["parked", "answered 7"]  # before any loop turn: no delivery waits for the fetch's task
    assert await task == 7
    assert parked.resume() is True  # taken already: nothing runs twice
    assert steps == ["parked", "answered 7"]


async def test_a_waiter_parked_again_by_the_early_step_is_carried_on_by_its_task():
    loop = asyncio.get_running_loop()
    first, second = PromptFuture(loop=loop), PromptFuture(loop=loop)
    steps = []

    async def fetch():
        await first
        steps.append("first")
        await second  # not enough data yet: parked again
        steps.append("second")
        return "done"

    task = start_eagerly(fetch())
    first.set_result(None)
    first.resume()
    assert steps == ["first"]
    await asyncio.sleep(0)  # the task's turn: it waits on the second future now, and may be resumed early again
    second.set_result(None)
    assert second.resume() is True
    assert steps == ["first", "second"]
    assert await task == "done"


async def test_an_error_in_the_early_step_is_raised_by_the_task_not_into_the_completer():
    loop = asyncio.get_running_loop()
    parked = PromptFuture(loop=loop)

    async def fetch():
        await parked
        raise KeyError("bug")

    task = start_eagerly(fetch())
    parked.set_result(None)
    assert parked.resume() is True  # the completer (a produce) goes on
    with pytest.raises(KeyError):
        await task


async def test_a_prompt_future_awaited_by_a_plain_task_is_an_ordinary_future():
    loop = asyncio.get_running_loop()
    parked = PromptFuture(loop=loop)
    steps = []

    async def fetch():
        await parked
        steps.append("answered")

    task = loop.create_task(fetch())
    await asyncio.sleep(0)
    parked.set_result(None)
    assert parked.resume() is False  # left to the task's next turn: the completer knows to yield to it
    assert steps == []
    await task
    assert steps == ["answered"]


async def test_a_cancel_after_an_early_step_reaches_the_coroutine_where_it_waits_now():
    loop = asyncio.get_running_loop()
    parked, never = PromptFuture(loop=loop), loop.create_future()
    cleaned = []

    async def fetch():
        await parked
        try:
            await never
        finally:
            cleaned.append(True)

    task = start_eagerly(fetch())
    parked.set_result(None)
    parked.resume()
    await asyncio.sleep(0)  # the task carries on: it waits where the early step left the coroutine
    task.cancel()  # the connection closed
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned == [True]
